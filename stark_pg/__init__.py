"""stark-pg: retrieval over semi-structured knowledge bases (STaRK) inside PostgreSQL."""

__version__ = "0.1.0"
