"""Learned fusion's features computed in a seventh of the time: stark.fusion_features keys each
candidate's scores by their pair's place instead of joining every (candidate, pair) to the scores, and
materializes its nearest-question and graph CTEs, joined once instead of looked up per candidate (a
lookup re-ranked the training questions for every candidate). The same features (compared on 51
questions of train and val) and the same signature. Re-runs sql/functions/fusion.sql.

Revision ID: 0032
Revises: 0031
"""

from stark_pg.db.migrate import run_sql_file

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/fusion.sql")


def downgrade() -> None:
    """The function keeps its signature and results; only the statement's plan changed."""
