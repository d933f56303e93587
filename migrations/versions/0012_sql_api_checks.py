"""SQL API arguments checked: stark.neighbors caps hops at 10, and an unknown SKB name is an error
(stark.require_skb) in stark.neighbors, stark.bm25, stark.document, stark.document_chunks and
stark.answer_type_votes instead of an empty result (the other functions taking a name already raised).
Re-runs sql/functions/graph.sql (first: the others call stark.require_skb) and the files of those functions.

Revision ID: 0012
Revises: 0011
"""

from stark_pg.db.migrate import run_sql_file

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


FILES = ("functions/document.sql", "functions/lexical.sql", "functions/dense.sql", "functions/answer_type.sql")


def upgrade() -> None:
    run_sql_file("functions/graph.sql")
    for relative in FILES:
        run_sql_file(relative)


def downgrade() -> None:
    """0011's behaviour: the same files with stark.skb_id (NULL, so no rows, for an unknown name) in
    place of stark.require_skb, and stark.neighbors without its checks."""
    from alembic import op

    from stark_pg.resources import sql_text

    execute = op.get_bind().connection.driver_connection.execute
    for relative in FILES:
        # the files as they are now: later checks (0014's stark.require_scope in stark.bm25) go too
        execute(sql_text(relative).replace("stark.require_scope(skb_name, coalesce(field, '*'))", "stark.skb_id(skb_name)")
                .replace("stark.require_skb(", "stark.skb_id("))
    execute("drop function if exists stark.require_scope(text, text)")
    execute('''
create or replace function stark.neighbors(skb_name text, start_node bigint, rel text default null, hops int default 1)
returns table (node_id bigint, type text, name text, hop int)
language sql stable as $$
    with recursive walk(node_id, hop) as (
        select e.dst, 1
        from stark.edge e
        where e.skb_id = stark.skb_id(skb_name) and e.src = start_node and (rel is null or e.relation = rel)
        union
        select e.dst, w.hop + 1
        from walk w
        join stark.edge e on e.skb_id = stark.skb_id(skb_name) and e.src = w.node_id
        where w.hop < hops and (rel is null or e.relation = rel)
    )
    select n.node_id, n.type, n.name, min(w.hop)::int as hop
    from walk w
    join stark.node n on n.skb_id = stark.skb_id(skb_name) and n.node_id = w.node_id
    where w.node_id <> start_node
    group by n.node_id, n.type, n.name
    order by hop, n.node_id
$$''')
    execute("drop function if exists stark.require_skb(text)")
