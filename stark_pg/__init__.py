"""stark-pg: retrieval over semi-structured knowledge bases (STaRK) inside PostgreSQL.

The Python API (`stark_pg.connect`, `stark_pg.load`, ...) lives in stark_pg.api and is imported on
first use, so `import stark_pg` (and every CLI command) stays cheap.
"""

__version__ = "0.2.0"

_API = ("connect", "load", "Database", "SKB", "SearchHit", "Hits", "Evaluation",
        "LoadError", "UnknownMethod", "OptionError", "MissingIndex", "DeviceError")

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        from stark_pg import api

        return getattr(api, name)
    raise AttributeError(f"module 'stark_pg' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
