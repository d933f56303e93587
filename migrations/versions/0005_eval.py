"""Evaluation runs and per-query results: stark.eval_run, stark.eval_result, stark.eval_summary.

Revision ID: 0005
Revises: 0004
"""

from stark_pg.db.migrate import run_sql_file

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0005_eval.sql")


def downgrade() -> None:
    from alembic import op

    op.execute("drop view if exists stark.eval_summary")
    op.execute("drop table if exists stark.eval_result, stark.eval_run")
