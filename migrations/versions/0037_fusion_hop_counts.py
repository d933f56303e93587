"""Learned fusion's hop1_sum, hop1_second and hop1_count features: over the distinct entities the question
names (its best name matches) one hop from the candidate, the sum of their weights, the second largest and
how many. stark.fusion_features returns the three last and stark.fusion_feature_names names them, so that a
model trained before them keeps its features' places. The signatures are unchanged. Runs
sql/functions/fusion.sql.

Revision ID: 0037
Revises: 0036
"""

from stark_pg.db.migrate import run_sql_file

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/fusion.sql")


def downgrade() -> None:
    """0036's functions come back: the same signatures, without the three features."""
    run_sql_file("downgrade/0037_fusion_hop_counts.sql")
