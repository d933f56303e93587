"""Agent retriever: its training history tables, the sandbox role, the toolkit (schema agent).

Revision ID: 0011
Revises: 0010
"""

from stark_pg.db.migrate import run_sql_file

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0011_agent.sql")
    run_sql_file("functions/agent.sql")


def downgrade() -> None:
    from alembic import op

    execute = op.get_bind().connection.driver_connection.execute
    execute("drop schema if exists agent cascade")
    execute("drop table if exists stark.agent_program, stark.agent_run")
    execute("drop owned by stark_agent")
    execute("drop role if exists stark_agent")
