"""Training: learning what retrieval methods weigh (mFAR's query-conditioned field weights)."""
