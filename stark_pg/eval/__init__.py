"""Evaluation: STaRK-compatible metrics, the runner that stores per-query results, reports and TREC files."""
