"""LLM layer: stark.llm_cache, every request and response keyed by provider, model and request hash.

Revision ID: 0006
Revises: 0005
"""

from stark_pg.db.migrate import run_sql_file

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0006_llm.sql")


def downgrade() -> None:
    from alembic import op

    op.execute("drop table if exists stark.llm_cache")
