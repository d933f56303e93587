"""Learned fusion reads stark.mfar_fields once per search instead of twice: stark.fusion_pairs took the
lexical and the dense fields from two calls, each scanning the SKB's fields, relations and chunk kinds
(about 11 ms on the slice); stark.fusion_feature_names, which called stark.fusion_pairs twice, now
calls it once. The same pairs in the same order, and the same signatures. Re-runs
sql/functions/fusion.sql.

Revision ID: 0034
Revises: 0033
"""

from stark_pg.db.migrate import run_sql_file

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/fusion.sql")


def downgrade() -> None:
    """The functions keep their signatures and results; only how often they read the fields changed."""
