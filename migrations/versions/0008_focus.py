"""4StepFocus: entity linking, graph substitution and ranking functions (sql/functions/focus.sql).

Revision ID: 0008
Revises: 0007
"""

from stark_pg.db.migrate import run_sql_file

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/focus.sql")


def downgrade() -> None:
    from alembic import op

    execute = op.get_bind().connection.driver_connection.execute
    execute("drop function if exists stark.focus_rank(text, vector, bigint[], text, int, text), "
            "stark.focus_substitute(text, jsonb, boolean, boolean, int), "
            "stark.focus_revise_sql(int, stark.focus_domain, stark.focus_domain, text, text), "
            "stark.focus_domain_source(int, stark.focus_domain, int, int, text), "
            "stark.focus_name_candidates(text, text, int), stark.focus_normalize(text)")
    execute("drop index if exists stark.node_compact_name_idx")
    execute("drop function if exists stark.focus_compact(text)")
    execute("drop type if exists stark.focus_domain")
