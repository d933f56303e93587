"""BM25 through pg_textsearch: per-scope tables and indexes kept by stark.lex_refresh, the engine choice
(stark.bm25_engine), stark.bm25_top, and stark.bm25's `engine` argument. Re-runs sql/functions/lexical.sql.

Revision ID: 0017
Revises: 0016
"""

from stark_pg.db.migrate import run_sql_file

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/lexical.sql")


def downgrade() -> None:
    """Back to the SQL engine: the pg_textsearch tables go and stark.bm25 gets 0014's signature back
    (no `engine`). stark.lex_refresh keeps its third argument (a two-argument call still resolves to
    it) and with it the naming functions it calls."""
    from alembic import op

    op.execute("""do $$ declare t record; begin
        for t in select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
                 where n.nspname = 'stark' and c.relkind = 'r' and c.relname like 'lexbm25\\_%' loop
            execute format('drop table stark.%I', t.relname);
        end loop; end $$""")
    op.execute("drop function if exists stark.bm25(text, text, int, text, double precision, double precision, text)")
    op.execute("drop function if exists stark.bm25_top(int, text, text, int, double precision, double precision, text)")
    op.execute("drop function if exists stark.bm25_engine(int, text, text, double precision, double precision)")
    op.execute("drop function if exists stark.drop_bm25_tables(int, text[])")
    op.execute("""
create or replace function stark.bm25(skb_name text, query text, k int default 10, field text default null,
                                      k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language sql stable as $$
    select s.node_id, s.score
    from stark.bm25_scores(stark.require_scope(skb_name, coalesce(field, '*')), coalesce(field, '*'), query, k1, b) s
    order by s.score desc, s.node_id
    limit k
$$""")
