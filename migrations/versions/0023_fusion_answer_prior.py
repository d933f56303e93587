"""Learned fusion gains a feature, `answer_prior`: how often a candidate answers a training question
(each question adding 1 over its number of answers; questions with the question's own text left out).
Appended after the existing features, so models trained before keep their meaning (they read f[1..37]).
Re-runs sql/functions/fusion.sql.

Revision ID: 0023
Revises: 0022
"""

from stark_pg.db.migrate import run_sql_file

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/fusion.sql")


def downgrade() -> None:
    """The added feature is the last; models trained without it ignore it."""
