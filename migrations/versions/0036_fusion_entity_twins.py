"""Learned fusion's ent_answer and ent_best features: the training questions that name an entity the
question names, found through stark.query_link (each stored question's best name matches, filled by
stark.link_queries), and the candidate as their answer. stark.fusion_features returns the two last and
stark.fusion_feature_names names them, so that a model trained before them keeps its features' places.
The signatures are unchanged. Runs sql/schema/0036_query_link.sql, then sql/functions/fusion.sql.

Revision ID: 0036
Revises: 0035
"""

from stark_pg.db.migrate import run_sql_file

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0036_query_link.sql")
    run_sql_file("functions/fusion.sql")


def downgrade() -> None:
    """0035's functions come back (same signatures, without the two features), then the table goes: it
    holds nothing but what stark.link_queries computes again from the questions."""
    run_sql_file("downgrade/0036_fusion_entity_twins.sql")
