"""A method's defaults chosen per SKB on its train split: stark.tuned_setting, written by `stark-pg tune`
and read by hybrid when a search sets none of its fusion settings. Runs sql/schema/0043_tuned_setting.sql.

Revision ID: 0043
Revises: 0042
"""

from alembic import op

from stark_pg.db.migrate import run_sql_file

revision = "0043"
down_revision = "0042"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0043_tuned_setting.sql")


def downgrade() -> None:
    """The chosen settings go; hybrid falls back to its built-in defaults (`stark-pg tune` chooses again)."""
    op.execute("drop table if exists stark.tuned_setting")
