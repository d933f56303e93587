-- BM25 in SQL: building the postings of one scope, and scoring queries against them.

-- The texts of one scope of one SKB: the whole rendered document ('*'), the name, the type
-- ('gene/protein' reads as 'gene protein'), one relation ('relation:<relation>': the names of all
-- the node's neighbours by that relation, as mFAR turns relations into fields), or one text field.
create or replace function stark.scope_texts(skb int, target_scope text)
returns table (node_id bigint, body text)
language sql stable as $$
    select n.node_id, stark.render_document(skb, n.node_id, false)
    from stark.node n where target_scope = '*' and n.skb_id = skb
    union all
    select n.node_id, n.name
    from stark.node n where target_scope = 'name' and n.skb_id = skb and n.name is not null
    union all
    select n.node_id, translate(n.type, '/_', '  ')
    from stark.node n where target_scope = 'type' and n.skb_id = skb
    union all
    select e.src, string_agg(coalesce(m.name, e.dst::text), ', ' order by m.name, e.dst)
    from stark.edge e
    left join stark.node m on m.skb_id = e.skb_id and m.node_id = e.dst
    where target_scope like 'relation:%' and e.skb_id = skb and e.relation = substr(target_scope, 10)
    group by e.src
    union all
    select f.node_id, f.body
    from stark.node_field f
    where target_scope not in ('*', 'name', 'type') and target_scope not like 'relation:%'
      and f.skb_id = skb and f.field = target_scope
$$;

-- Bring one scope's postings up to date: re-tokenise documents that are new or whose text changed,
-- remove documents that are gone, then recompute the scope's statistics. Returns the number of
-- documents (re)indexed, so a second run on unchanged data returns 0.
create or replace function stark.lex_refresh(skb int, target_scope text)
returns int
language plpgsql as $$
declare
    changed int;
begin
    create temp table lex_current on commit drop as
        select t.node_id, t.body, md5(t.body) as doc_hash from stark.scope_texts(skb, target_scope) t;
    create temp table lex_stale on commit drop as
        select d.node_id from stark.lex_doc d
        where d.skb_id = skb and d.scope = target_scope
          and not exists (select 1 from lex_current c where c.node_id = d.node_id and c.doc_hash = d.doc_hash);
    create temp table lex_todo on commit drop as
        select c.* from lex_current c
        where not exists (select 1 from stark.lex_doc d
                          where d.skb_id = skb and d.scope = target_scope and d.node_id = c.node_id
                            and d.doc_hash = c.doc_hash);
    get diagnostics changed = row_count;
    create temp table lex_touched (term text primary key) on commit drop;
    insert into lex_touched
        select distinct p.term from stark.lex_posting p join lex_stale s on s.node_id = p.node_id
        where p.skb_id = skb and p.scope = target_scope;

    delete from stark.lex_posting p using lex_stale s
        where p.skb_id = skb and p.scope = target_scope and p.node_id = s.node_id;
    delete from stark.lex_doc d using lex_stale s
        where d.skb_id = skb and d.scope = target_scope and d.node_id = s.node_id;

    create temp table lex_terms on commit drop as
        select c.node_id, c.doc_hash, t.lexeme as term, coalesce(array_length(t.positions, 1), 1) as tf
        from lex_todo c, unnest(to_tsvector('english'::regconfig, c.body)) t;
    insert into stark.lex_doc (skb_id, scope, node_id, doc_hash, len)
        select skb, target_scope, c.node_id, c.doc_hash, coalesce(l.len, 0)
        from lex_todo c
        left join (select t.node_id, sum(t.tf)::int as len from lex_terms t group by t.node_id) l
               on l.node_id = c.node_id;
    insert into stark.lex_posting (skb_id, scope, term, node_id, tf, len)
        select skb, target_scope, t.term, t.node_id, t.tf, d.len
        from lex_terms t
        join stark.lex_doc d on d.skb_id = skb and d.scope = target_scope and d.node_id = t.node_id;
    insert into lex_touched select distinct t.term from lex_terms t on conflict do nothing;

    delete from stark.lex_term lt using lex_touched x
        where lt.skb_id = skb and lt.scope = target_scope and lt.term = x.term;
    insert into stark.lex_term (skb_id, scope, term, df)
        select skb, target_scope, p.term, count(*)
        from stark.lex_posting p join lex_touched x on x.term = p.term
        where p.skb_id = skb and p.scope = target_scope
        group by p.term;

    delete from stark.lex_stats where skb_id = skb and scope = target_scope;
    insert into stark.lex_stats (skb_id, scope, n_docs, total_len)
        select skb, target_scope, count(*), coalesce(sum(len), 0)
        from stark.lex_doc where skb_id = skb and scope = target_scope;

    drop table lex_current, lex_stale, lex_todo, lex_terms, lex_touched;
    return changed;
end
$$;
comment on function stark.lex_refresh(int, text) is
    'Re-indexes the new or changed documents of one lexical scope of an SKB and refreshes its statistics.';

-- The lexemes of a query, with multiplicity: a term typed twice counts twice, as in Lucene's BM25
-- (and bm25s) where the score sums over the query's tokens.
create or replace function stark.query_terms(query text)
returns table (term text, qtf int)
language sql immutable parallel safe as $$
    select t.lexeme, coalesce(array_length(t.positions, 1), 1)
    from unnest(to_tsvector('english'::regconfig, query)) t
$$;

-- Okapi BM25 as Lucene (since 8.0) and bm25s compute it: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
-- tf part = tf / (tf + k1 (1 - b + b len / avgdl)) without Okapi's constant (k1 + 1), which changes no
-- ranking. Scores every document of a scope that holds at least one query term; callers order and limit.
create or replace function stark.bm25_scores(skb int, target_scope text, query text,
                                             k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language sql stable parallel safe as $$
    with st as (select n_docs::double precision as n, total_len::double precision / greatest(n_docs, 1) as avgdl
                from stark.lex_stats where skb_id = skb and scope = target_scope),
    t as (select q.term, q.qtf * ln(1 + (st.n - lt.df + 0.5) / (lt.df + 0.5)) as weight
          from stark.query_terms(query) q
          join stark.lex_term lt on lt.skb_id = skb and lt.scope = target_scope and lt.term = q.term
          cross join st)
    select p.node_id, sum(t.weight * p.tf / (p.tf + k1 * (1 - b + b * p.len / st.avgdl)))
    from t
    join stark.lex_posting p on p.skb_id = skb and p.scope = target_scope and p.term = t.term
    cross join st
    group by p.node_id
$$;
comment on function stark.bm25_scores(int, text, text, double precision, double precision) is
    'BM25 of every matching document of one scope (by skb_id); see stark.bm25 for the ranked API.';

-- The SKB's id when its lexical index covers `scope`; otherwise an error (as stark_pg.retrieve.bm25
-- raises): an SKB without a lexical index, or a field that is not indexed, would otherwise give an
-- empty ranking that reads as "nothing matched".
create or replace function stark.require_scope(skb_name text, scope text) returns int
language plpgsql stable as $$
declare
    skb int := stark.require_skb(skb_name);
    known text;
begin
    if exists (select 1 from stark.lex_stats s where s.skb_id = skb and s.scope = require_scope.scope) then
        return skb;
    end if;
    select string_agg(s.scope, ', ' order by s.scope) into known
    from stark.lex_stats s where s.skb_id = skb and s.scope <> '*';
    if known is null then
        raise exception 'SKB % has no lexical index', quote_literal(skb_name)
            using errcode = 'invalid_parameter_value', hint = 'run `stark-pg index ' || skb_name || '`';
    end if;
    raise exception 'SKB % has no indexed field % (fields: %)', quote_literal(skb_name),
        coalesce(quote_literal(scope), 'NULL'), known
        using errcode = 'invalid_parameter_value',
              hint = 'type and relation:<relation> are indexed by `stark-pg index ' || skb_name || ' --relation-fields`';
end
$$;
comment on function stark.require_scope(text, text) is
    'The numeric key of the named SKB if its lexical index covers the scope (''*'', ''name'', a field); an error otherwise.';

create or replace function stark.bm25(skb_name text, query text, k int default 10, field text default null,
                                      k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language sql stable as $$
    select s.node_id, s.score
    from stark.bm25_scores(stark.require_scope(skb_name, coalesce(field, '*')), coalesce(field, '*'), query, k1, b) s
    order by s.score desc, s.node_id
    limit k
$$;
comment on function stark.bm25(text, text, int, text, double precision, double precision) is
    'Top-k nodes of the named SKB by BM25 over whole documents, or over one field (''name'' or a text field).';
