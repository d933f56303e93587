-- Hybrid retrieval: BM25 and VSS fused in one SQL statement.
-- fusion 'rrf':      weight / (rrf_k + rank_bm25) + (1 - weight) / (rrf_k + rank_vss)
--                    (weight 0.5 ranks exactly as plain reciprocal rank fusion);
-- fusion 'weighted': weight * bm25' + (1 - weight) * vss', scores min-max normalised within each list.
-- Each list contributes its top `pool` nodes; a node missing from one list gets nothing from it.

create or replace function stark.hybrid(skb_name text, query text, embedding vector, k int default 10,
                                        fusion text default 'rrf', weight double precision default 0.5,
                                        pool int default 100, rrf_k int default 60,
                                        model text default 'all-MiniLM-L6-v2')
returns table (node_id bigint, score double precision)
language sql stable as $$
    with checked as materialized (     -- the arguments, refused before any work (see stark.check_count)
        select stark.check_count('hybrid', 'k', k, 0, stark.k_max()) as k,
               stark.check_choice('hybrid', 'fusion', fusion, array['rrf', 'weighted']) as fusion,
               stark.check_number('hybrid', 'weight', weight, 0, 1) as weight,
               stark.check_count('hybrid', 'pool', pool, 1, 10000) as pool,
               stark.check_count('hybrid', 'rrf_k', rrf_k, 1, 1000000) as rrf_k),
    lex as (
        select b.node_id, b.score, row_number() over (order by b.score desc, b.node_id) as r
        from checked c, stark.bm25(skb_name, query, c.pool) b),
    den as (
        select v.node_id, v.score, row_number() over (order by v.score desc, v.node_id) as r
        from checked c, stark.vss(skb_name, embedding, c.pool, model) v),
    lexn as (
        select l.node_id, l.r, coalesce((l.score - min(l.score) over ())
                                        / nullif(max(l.score) over () - min(l.score) over (), 0), 1) as s
        from lex l),
    denn as (
        select d.node_id, d.r, coalesce((d.score - min(d.score) over ())
                                        / nullif(max(d.score) over () - min(d.score) over (), 0), 1) as s
        from den d),
    fused as (
        select coalesce(l.node_id, d.node_id) as node_id,
               case fusion
                   when 'rrf' then weight * coalesce(1.0 / (rrf_k + l.r), 0)
                                   + (1 - weight) * coalesce(1.0 / (rrf_k + d.r), 0)
                   when 'weighted' then weight * coalesce(l.s, 0) + (1 - weight) * coalesce(d.s, 0)
               end as score
        from lexn l full join denn d on d.node_id = l.node_id)
    select f.node_id, f.score from fused f
    order by f.score desc, f.node_id
    limit (select c.k from checked c)
$$;
comment on function stark.hybrid(text, text, vector, int, text, double precision, int, int, text) is
    'BM25 and VSS of the named SKB fused by reciprocal rank (fusion => ''rrf'') or normalised scores (''weighted'').';

-- Hybrid's tuned defaults: the fusion settings `stark-pg tune` chose for the SKB on its train split
-- (stark.tuned_setting), NULL when none are stored. A search that sets none of the keys named here
-- (`stark.hybrid_tuned_keys()`) takes them; one that sets any of them takes the built-in defaults
-- (RRF, weight 0.5, pool 100, rrf_k 60) for the rest (stark_pg/retrieve/hybrid.py resolve_options).
create or replace function stark.hybrid_tuned_keys() returns text[]
language sql immutable as $$
    select array['fusion', 'weight', 'pool', 'rrf_k']
$$;
comment on function stark.hybrid_tuned_keys() is
    'The hybrid settings `stark-pg tune` may store as an SKB''s defaults (fusion, weight, pool, rrf_k).';

create or replace function stark.tuned_options(skb int, method text) returns jsonb
language sql stable as $$
    select t.options from stark.tuned_setting t where t.skb_id = skb and t.method = tuned_options.method
$$;
comment on function stark.tuned_options(int, text) is
    'The settings `stark-pg tune` stored as a method''s defaults for an SKB (by skb_id), NULL if none.';
