"""SQL API arguments checked (found by tests/test_properties_sql.py): stark.vss and stark.multivss refuse a
NULL k (it went into the generated statement's text, a syntax error; stark.hybrid and stark.focus_rank
passed it on), and stark.kar_neighbours_sql takes hops from 1 to 6 as stark.kar_neighbours does (its SQL
text grows with the square of hops: 2000 ran past any statement timeout). Re-runs sql/functions/dense.sql
and sql/functions/kar.sql.

Revision ID: 0015
Revises: 0014
"""

from stark_pg.db.migrate import run_sql_file

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/dense.sql")
    run_sql_file("functions/kar.sql")


def downgrade() -> None:
    """Nothing to undo: the checks refuse only arguments that failed before (a syntax error) or never
    finished."""
