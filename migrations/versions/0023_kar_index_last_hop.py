"""KAR's relation propagation gets an approximate last hop through the HNSW index: stark.kar_neighbours
takes `last_hop text default 'exact'` ('exact' or 'index'), stark.kar_neighbours_sql the same as its
fifth argument. The exact path's rows are unchanged (tests/test_kar_neighbours.py). Drops the old
signatures, then re-runs sql/functions/kar.sql.

Revision ID: 0023
Revises: 0022
"""

from stark_pg.db.migrate import run_sql_file

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from alembic import op

    execute = op.get_bind().connection.driver_connection.execute
    execute("drop function if exists stark.kar_neighbours(text, bigint[], int, vector, int, int, text, boolean), "
            "stark.kar_neighbours_sql(int, text, int, boolean)")
    run_sql_file("functions/kar.sql")


def downgrade() -> None:
    """The new signatures go; 0010's downgrade (drop if exists) then finds nothing of the old ones left."""
    from alembic import op

    execute = op.get_bind().connection.driver_connection.execute
    execute("drop function if exists stark.kar_neighbours(text, bigint[], int, vector, int, int, text, boolean, text), "
            "stark.kar_neighbours_sql(int, text, int, boolean, text)")
