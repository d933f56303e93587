"""Learned fusion's knn_best and knn_first features: the cosine of the nearest training question that
has the candidate as an answer, and 1 over its rank among the `knn` nearest. stark.fusion_features
returns them last and stark.fusion_feature_names names them, after trained_dense, so that a model
trained before them keeps its features' places. The signatures are unchanged. Re-runs
sql/functions/fusion.sql.

Revision ID: 0033
Revises: 0032
"""

from stark_pg.db.migrate import run_sql_file

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/fusion.sql")


def downgrade() -> None:
    """0032's functions come back (same signatures, without the two features)."""
    run_sql_file("downgrade/0033_fusion_knn_best.sql")
