"""Trained retrievers (the fine-tuned dense retriever, QA-GNN): stark.trained_model.

Revision ID: 0020
Revises: 0019
"""

from stark_pg.db.migrate import run_sql_file

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0020_trained_model.sql")


def downgrade() -> None:
    from alembic import op

    op.execute("drop table if exists stark.trained_model")
