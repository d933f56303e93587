"""Synthesized questions' provenance: stark.synth_run (a split's settings) and stark.synth_question (per
question: template, anchors, candidates, answers, LLM provenance). Runs sql/schema/0041_synthesize.sql.

Revision ID: 0041
Revises: 0040
"""

from alembic import op

from stark_pg.db.migrate import run_sql_file

revision = "0041"
down_revision = "0040"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0041_synthesize.sql")


def downgrade() -> None:
    """The questions stay in stark.query; how they were made goes."""
    op.execute("drop table if exists stark.synth_question, stark.synth_run")
