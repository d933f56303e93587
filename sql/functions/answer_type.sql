-- The answer type the nearest training queries vote for. Each of the k queries of the splits most
-- similar to the question (cosine over stark.query_vector, exact: a split has hundreds or thousands
-- of queries) gives one vote, shared among the node types of its answers in proportion to how many
-- answers have each type. Queries whose text equals the question's are left out, so a question
-- asked from the training split does not vote for itself. Rows: every voted type, best first, with
-- its share of the votes.
create or replace function stark.answer_type_votes(skb_name text, query vector, split_names text[] default '{train}',
                                                   k int default 10, model text default 'all-MiniLM-L6-v2',
                                                   question text default null)
returns table (node_type text, share double precision, voters int)
language sql stable as $$
    with skb as (select stark.require_skb(skb_name) as id),
    near as (
        select q.query_id, q.answer_ids
        from stark.query q
        join stark.query_vector v on v.skb_id = q.skb_id and v.query_id = q.query_id and v.model = answer_type_votes.model
                                   and v.body_md5 = md5(q.body)
        where q.skb_id = (select id from skb) and q.split = any(split_names)
          and (question is null or q.body <> question)
        order by v.vec <=> answer_type_votes.query, q.query_id
        limit stark.check_count('answer_type_votes', 'k', k, 0, stark.k_max())),
    votes as (
        select n.type, count(*)::double precision / sum(count(*)) over (partition by near.query_id) as vote
        from near
        cross join lateral unnest(near.answer_ids) as a(node_id)
        join stark.node n on n.skb_id = (select id from skb) and n.node_id = a.node_id
        group by near.query_id, n.type)
    select type, sum(vote) / (select count(*) from near), count(*)::int
    from votes group by type
    order by 2 desc, 1
$$;
comment on function stark.answer_type_votes(text, vector, text[], int, text, text) is
    'Node types of the answers of the k most similar queries of some splits, with their share of the votes.';
