-- Step 3 of 4StepFocus: the filtered candidates ranked by cosine similarity (exact: they are few),
-- ahead of all other nodes, ranked by cosine similarity plus `type_weight` times the probability of
-- their node type being the answer's (stark_pg/retrieve/focus/answer_type.py), k in all.
-- `candidates` null: no candidate tier. No type probabilities (or weight 0): the rest is plain VSS.
-- The other nodes are the union of the HNSW's k best (no bonus) and an exact scan of the nodes of
-- the types that have a probability, so the bonus cannot hide a node the index did not return.
-- Scores keep the order: a candidate scores 3 + type_weight + its cosine, any other node its cosine
-- plus its bonus.
drop function if exists stark.focus_rank(text, vector, bigint[], text, int, text);
create or replace function stark.focus_rank(skb_name text, query vector, candidates bigint[], type_names text[],
                                            type_probs double precision[], type_weight double precision,
                                            k int default 20, model text default 'all-MiniLM-L6-v2')
returns table (node_id bigint, score double precision, filtered boolean)
language plpgsql stable as $$
declare
    t record := stark.dense_target(skb_name, model, query, false);
begin
    if candidates is null and (type_weight = 0 or coalesce(cardinality(type_names), 0) = 0) then
        return query select s.node_id, s.score, false from stark.vss(skb_name, query, k, model) s;
        return;
    end if;
    return query execute format(
        'with f as materialized ('
        '    select d.node_id, 3 + $6 + (1 - (d.vec <=> $1)) as score from stark.%1$I d '
        '    where d.skb_id = %2$s and d.node_id = any ($2) '
        '    order by score desc, d.node_id limit $4), '
        'p as (select p.type, p.prob from unnest($3::text[], $7::double precision[]) as p(type, prob) '
        '      where p.prob > 0 and $6 > 0), '
        'o as ('
        '    select d.node_id, 1 - (d.vec <=> $1) + $6 * p.prob as score from stark.%1$I d '
        '    join stark.node n on n.skb_id = %2$s and n.node_id = d.node_id '
        '    join p on p.type = n.type '
        '    where d.skb_id = %2$s '
        '    union all '
        '    select v.node_id, v.score from stark.vss($5, $1, $4 + (select count(*)::int from f), $8) v), '
        'rest as ('
        '    select o.node_id, max(o.score) as score from o '
        '    where o.node_id not in (select f.node_id from f) '
        '    group by o.node_id '
        '    order by 2 desc, 1 limit greatest($4 - (select count(*)::int from f), 0)) '
        'select f.node_id, f.score, true from f '
        'union all '
        'select rest.node_id, rest.score, false from rest '
        'order by 2 desc, 1', t.tbl, t.skb)
        using query, candidates, type_names, k, skb_name, type_weight, type_probs, model;
end
$$;
comment on function stark.focus_rank(text, vector, bigint[], text[], double precision[], double precision, int, text) is
    '4StepFocus ranking: filtered candidates by cosine first, then every other node by cosine plus type_weight times its type''s probability.';
