"""Learned fusion's trained_dense feature: stark.fusion_features takes `dense_models text[]` and
`dense_qvecs vector[]` (the cosine of each candidate under fine-tuned dense models, averaged by the new
stark.mean_cosine), and stark.fusion_feature_names takes `trained_dense boolean`. Without them the
features are unchanged. Re-runs sql/functions/fusion.sql, which drops the old signatures.

Revision ID: 0025
Revises: 0024
"""

from stark_pg.db.migrate import run_sql_file

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/fusion.sql")


def downgrade() -> None:
    """The new signatures and stark.mean_cosine go, and 0024's functions come back."""
    run_sql_file("downgrade/0025_fusion_trained_dense.sql")
