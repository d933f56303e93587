"""Building what retrieval reads: the lexical (BM25) index and the dense (embedding) index.

Both are incremental: re-running does only what is missing or changed.
"""
