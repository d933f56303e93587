"""Core SKB schema: skb, node, node_field, edge, query, and the SQL API that reads them.

Revision ID: 0001
Revises:
"""

from alembic import op

from stark_pg.db.migrate import run_sql_file

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0001_core.sql")
    run_sql_file("functions/graph.sql")
    run_sql_file("functions/skb.sql")


def downgrade() -> None:
    op.execute("drop schema if exists stark cascade")
