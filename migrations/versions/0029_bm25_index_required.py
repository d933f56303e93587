"""One error for a lexical scope without a pg_textsearch index. stark.bm25_engine (engine textsearch)
and stark.bm25_index_scan both raised "scope ... has no pg_textsearch index", the second without an
SQLSTATE of its own (P0001 where the first gave 22023, invalid_parameter_value). The new
stark.bm25_index_required(skb, scope) returns the scope's index or raises that error, and both call
it. Re-runs sql/functions/lexical.sql.

Revision ID: 0029
Revises: 0028
"""

from stark_pg.db.migrate import run_sql_file

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/lexical.sql")


def downgrade() -> None:
    """0028's stark.bm25_engine and stark.bm25_index_scan come back; stark.bm25_index_required goes."""
    run_sql_file("downgrade/0029_bm25_index_required.sql")
