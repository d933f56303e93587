-- Named statements for the lexical index and BM25 retrieval.

-- name: lexical_scopes(skb_id, extra)
-- The scopes an SKB's lexical index covers: the whole document, the name, each text field, plus
-- mFAR's 'type' and 'relation:<relation>' scopes when asked for (`extra`) or indexed before, the
-- latter as long as the SKB still has such a relation.
with wanted as (
    select '*' as scope
    union select 'name'
    union select distinct field from stark.node_field where skb_id = :skb_id
    union select s from unnest(cast(:extra as text[])) s
    union select scope from stark.lex_stats where skb_id = :skb_id and (scope = 'type' or starts_with(scope, 'relation:')))
select w.scope from wanted w
where not starts_with(w.scope, 'relation:')
   or exists (select 1 from stark.edge e where e.skb_id = :skb_id and e.relation = substr(w.scope, 10))
order by 1;

-- name: refresh_scope(skb_id, scope, textsearch)$
-- textsearch: true builds the scope's pg_textsearch index, null builds it when the extension is here.
select stark.lex_refresh(:skb_id, :scope, :textsearch);

-- name: drop_bm25_tables(skb_id, keep)$
select stark.drop_bm25_tables(:skb_id, :keep);

-- name: bm25_engine(skb_id, scope, engine, k1, b)$
select stark.bm25_engine(:skb_id, :scope, :engine, :k1, :b);

-- name: drop_other_scopes(skb_id, scopes)!
delete from stark.lex_posting where skb_id = :skb_id and not (scope = any(:scopes));

-- name: drop_other_scope_docs(skb_id, scopes)!
delete from stark.lex_doc where skb_id = :skb_id and not (scope = any(:scopes));

-- name: drop_other_scope_stats(skb_id, scopes)!
delete from stark.lex_stats where skb_id = :skb_id and not (scope = any(:scopes));

-- name: indexed_scopes(skb_id)
-- The scopes of an SKB that have a lexical index (so a search can tell "unknown field" from "not indexed").
select scope, n_docs, total_len from stark.lex_stats where skb_id = :skb_id order by scope;

-- name: bm25_top(skb_id, scope, query, k1, b, k, engine)
select node_id, score from stark.bm25_top(:skb_id, :scope, :query, :k, :k1, :b, :engine);

-- name: drop_other_scope_terms(skb_id, scopes)!
delete from stark.lex_term where skb_id = :skb_id and not (scope = any(:scopes));

-- name: skb_relations(skb_id)
select distinct relation from stark.edge where skb_id = :skb_id order by 1;

