"""The database layer's own error, in a module of its own so that every db module can raise it.

Why here: connection.py starts the embedded server and runs migrations lazily; if the error lived there,
migrate.py and profile.py would import connection.py back and the package would import in a cycle.
"""

from __future__ import annotations


class DatabaseError(RuntimeError):
    """The database cannot be reached or lacks what stark-pg needs."""
