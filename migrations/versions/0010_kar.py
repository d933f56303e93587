"""KAR: relation propagation and document-based relation filtering (sql/functions/kar.sql).

Revision ID: 0010
Revises: 0009
"""

from stark_pg.db.migrate import run_sql_file

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/kar.sql")


def downgrade() -> None:
    from alembic import op

    execute = op.get_bind().connection.driver_connection.execute
    execute("drop function if exists stark.kar_neighbours(text, bigint[], int, vector, int, int, text, boolean), "
            "stark.kar_neighbours_sql(int, text, int, boolean)")
