"""Learned fusion: stark.fusion_model and the feature functions (sql/functions/fusion.sql).

Revision ID: 0016
Revises: 0015
"""

from stark_pg.db.migrate import run_sql_file

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0016_fusion.sql")
    run_sql_file("functions/fusion.sql")


def downgrade() -> None:
    from alembic import op

    op.execute("drop function if exists stark.fusion_features(text, text, vector, text, int, int, int, bigint[])")
    op.execute("drop function if exists stark.fusion_feature_names(text, text)")
    op.execute("drop function if exists stark.fusion_pairs(text, text)")
    op.execute("drop table if exists stark.fusion_model")
