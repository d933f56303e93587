"""mFAR's lexical fields through pg_textsearch: stark.mfar_field_scores and stark.mfar take `engine text`
('sql', 'textsearch' or 'auto', as stark.bm25_engine; mfar_field_scores defaults to 'sql', stark.mfar to
'auto'). A field whose scope has a pg_textsearch index takes its shortlist from the index and scores
the union of shortlists with the new stark.bm25_rows (BM25 of given documents, probing their
postings). The 'sql' engine's rows are unchanged (tests/test_mfar_textsearch.py). Re-runs
sql/functions/lexical.sql (stark.bm25_rows) and sql/functions/mfar.sql (which drops the old signatures).

Revision ID: 0024
Revises: 0023
"""

from stark_pg.db.migrate import run_sql_file

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/lexical.sql")
    run_sql_file("functions/mfar.sql")


def downgrade() -> None:
    """The new signatures and stark.bm25_rows go, and 0023's functions (no `engine`: every field by
    stark.bm25_scores) come back."""
    run_sql_file("downgrade/0024_mfar_textsearch.sql")
