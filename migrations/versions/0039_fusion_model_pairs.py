"""Learned fusion's search passes the stored model's (field, scorer) pairs to stark.fusion_features
(`pair_fields`, `pair_scorers`, two new arguments, NULL by default), which then skips stark.fusion_pairs:
that reads the SKB's fields, relations and chunk kinds by scanning its tables, 14 ms a search on the
slice and more as the SKB grows. The features are the same. Runs sql/functions/fusion.sql.

Revision ID: 0039
Revises: 0038
"""

from stark_pg.db.migrate import run_sql_file

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/fusion.sql")


def downgrade() -> None:
    """0038's functions come back: stark.fusion_features without the two arguments."""
    run_sql_file("downgrade/0039_fusion_model_pairs.sql")
