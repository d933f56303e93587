"""Cross-encoders among the trained models: stark.trained_model accepts kind 'cross-encoder', written by
`stark-pg train cross-encoder` and read by `-m fusion-ce`. Runs sql/schema/0044_cross_encoder.sql.

Revision ID: 0044
Revises: 0043
"""

from alembic import op

from stark_pg.db.migrate import run_sql_file

revision = "0044"
down_revision = "0043"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0044_cross_encoder.sql")


def downgrade() -> None:
    """The cross-encoders' rows go (their files stay under STARK_PG_HOME/models/cross-encoder/), and the
    table takes the two kinds it took before."""
    op.execute("delete from stark.trained_model where kind = 'cross-encoder'")
    op.execute("alter table stark.trained_model drop constraint if exists trained_model_kind_check")
    op.execute("alter table stark.trained_model add constraint trained_model_kind_check "
               "check (kind in ('dense', 'qagnn'))")
    op.execute("comment on table stark.trained_model is 'Trained retrievers (stark-pg train dense | qagnn): "
               "settings, per-epoch history and held-out metrics; weights under STARK_PG_HOME/models/.'")
