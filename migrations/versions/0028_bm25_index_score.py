"""BM25 through pg_textsearch returns the scores its index scan computed. The new
stark.bm25_index_scan runs the scan (the query text inlined as a literal, sequential scans off) and
reads bm25_get_current_score(); stark.bm25_top and mFAR's shortlists (stark.mfar_field_scores) use
it. stark.bm25_top computed `body <@> query` again for every returned row, tokenising its text (the
slice's top 1,000: 151 ms against 2.6 ms); mFAR's shortlists were empty on a table small enough for
the planner to prefer a sequential scan, whose rows carry no scan score. Re-runs
sql/functions/lexical.sql and sql/functions/mfar.sql.

Revision ID: 0028
Revises: 0027
"""

from stark_pg.db.migrate import run_sql_file

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/lexical.sql")
    run_sql_file("functions/mfar.sql")


def downgrade() -> None:
    """0027's stark.bm25_top and stark.mfar_field_scores come back; stark.bm25_index_scan goes."""
    run_sql_file("downgrade/0028_bm25_index_score.sql")
