"""Exact BM25 scores several lexical scopes in one pass: the new stark.bm25_scores_scopes reads the
query's terms once, each (scope, term) statistic by its key and then the postings, and
stark.mfar_field_scores (mFAR, learned fusion's features) calls it once for all its lexical fields
instead of stark.bm25_scores once per field; stark.bm25_scores is that function for one scope. Both
it and stark.bm25_rows now sum a document's terms in one order (by term), so that the scores, equal
to the last bit or two before, are the same bits whatever the plan and whichever engine: names whose
scores tie exactly no longer swap places with the plan. On the slice the eleven fields of learned
fusion took 16-17 ms against 34-52 ms (p50). Re-runs sql/functions/lexical.sql and
sql/functions/mfar.sql.

Revision ID: 0040
Revises: 0039
"""

from stark_pg.db.migrate import run_sql_file

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/lexical.sql")
    run_sql_file("functions/mfar.sql")


def downgrade() -> None:
    """0039's stark.bm25_scores, stark.bm25_rows and stark.mfar_field_scores come back; stark.bm25_scores_scopes
    goes."""
    run_sql_file("downgrade/0040_bm25_one_pass.sql")
