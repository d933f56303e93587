-- Named statements for the lexical index and BM25 retrieval.

-- name: lexical_scopes(skb_id)
-- The scopes an SKB's lexical index covers: the whole document, the name, and each text field.
select '*' as scope
union all select 'name'
union all (select distinct field from stark.node_field where skb_id = :skb_id order by field);

-- name: refresh_scope(skb_id, scope)$
select stark.lex_refresh(:skb_id, :scope);

-- name: drop_other_scopes(skb_id, scopes)!
delete from stark.lex_posting where skb_id = :skb_id and not (scope = any(:scopes));

-- name: drop_other_scope_docs(skb_id, scopes)!
delete from stark.lex_doc where skb_id = :skb_id and not (scope = any(:scopes));

-- name: drop_other_scope_stats(skb_id, scopes)!
delete from stark.lex_stats where skb_id = :skb_id and not (scope = any(:scopes));

-- name: indexed_scopes(skb_id)
select scope, n_docs, total_len from stark.lex_stats where skb_id = :skb_id order by scope;

-- name: bm25_top(skb_id, scope, query, k1, b, k)
select node_id, score from stark.bm25_scores(:skb_id, :scope, :query, :k1, :b)
order by score desc, node_id limit :k;

-- name: drop_other_scope_terms(skb_id, scopes)!
delete from stark.lex_term where skb_id = :skb_id and not (scope = any(:scopes));
