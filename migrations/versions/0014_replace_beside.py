"""Replacing an SKB builds the new version beside the old one: stark.carry_over_skb hands the old
version's derived rows (postings, vectors, eval runs, models) to the new skb_id, and
stark.delete_skb_rows deletes rows first and drops per-SKB indexes and partitions last, so the locks
that block other SKBs' readers are held only moments before the commit. Re-runs sql/functions/skb.sql.

Also: stark.bm25 raises for an SKB without a lexical index or a field that is not indexed
(stark.require_scope) instead of returning no rows; 4StepFocus's name candidates keep working without
a lexical index (they read stark.bm25_scores). Re-runs sql/functions/lexical.sql and focus.sql.

Revision ID: 0014
Revises: 0013
"""

from stark_pg.db.migrate import run_sql_file

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for relative in ("functions/skb.sql", "functions/lexical.sql", "functions/focus.sql"):
        run_sql_file(relative)


def downgrade() -> None:
    """Drops stark.carry_over_skb and stark.require_scope (stark.bm25 back to 0013's body: an unknown
    field or missing index gives no rows). The reordered stark.delete_skb_rows stays: it deletes the
    same rows; so does focus_name_candidates' direct read of the postings: it returns the same rows."""
    from alembic import op

    op.execute("drop function if exists stark.carry_over_skb(int, int)")
    op.execute("""
create or replace function stark.bm25(skb_name text, query text, k int default 10, field text default null,
                                      k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language sql stable as $$
    select s.node_id, s.score
    from stark.bm25_scores(stark.require_skb(skb_name), coalesce(field, '*'), query, k1, b) s
    order by s.score desc, s.node_id
    limit k
$$""")
    op.execute("drop function if exists stark.require_scope(text, text)")
