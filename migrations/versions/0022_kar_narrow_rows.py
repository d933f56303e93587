"""KAR's relation propagation groups narrow (anchor, neighbour, predecessor) rows by hashing and builds
the relation paths only for the nodes each hop keeps; the sets, paths and order are unchanged
(tests/test_kar_neighbours.py against the Python reference). Re-runs sql/functions/kar.sql.

Revision ID: 0022
Revises: 0021
"""

from stark_pg.db.migrate import run_sql_file

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/kar.sql")


def downgrade() -> None:
    """The function keeps its signature and results; only the statement it builds changed."""
