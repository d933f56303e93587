"""Hybrid retrieval in SQL: stark.hybrid() fusing stark.bm25() and stark.vss().

Revision ID: 0004
Revises: 0003
"""

from stark_pg.db.migrate import run_sql_file

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/hybrid.sql")


def downgrade() -> None:
    from alembic import op

    op.execute("drop function if exists stark.hybrid(text, text, vector, int, text, double precision, int, int, text)")
