"""Documents and the lexical (BM25) index: postings, statistics, stark.bm25().

Revision ID: 0002
Revises: 0001
"""

from stark_pg.db.migrate import run_sql_file

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0002_lexical.sql")
    run_sql_file("functions/skb.sql")
    run_sql_file("functions/document.sql")
    run_sql_file("functions/lexical.sql")


def downgrade() -> None:
    from alembic import op

    op.execute("drop table if exists stark.lex_posting, stark.lex_doc, stark.lex_stats")
