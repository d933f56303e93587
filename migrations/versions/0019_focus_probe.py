"""4StepFocus substitution at Prime scale: stark.focus_substitute skips revisions whose other set has not
changed, re-checks only the neighbours of lost members, and either probes the revised set's members
for one supporting edge or gathers the other set's edges, whichever reads fewer (stark.focus_probe_sql,
stark.focus_revise). Only the plan changes, not the sets. Re-runs sql/functions/focus.sql.

Revision ID: 0019
Revises: 0018
"""

from stark_pg.db.migrate import run_sql_file

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/focus.sql")


def downgrade() -> None:
    """The two helpers go; stark.focus_substitute keeps its signature and its sets (only the plan
    changed), so the body stays."""
    from alembic import op

    execute = op.get_bind().connection.driver_connection.execute
    execute("drop function if exists stark.focus_revise(int, stark.focus_domain, bigint, stark.focus_domain, "
            "bigint[], bigint, bigint, text, text, double precision), "
            "stark.focus_probe_sql(int, stark.focus_domain, boolean, text, text)")
