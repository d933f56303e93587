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

-- pg_textsearch (a BM25 index access method) keeps one set of corpus statistics per index, and
-- ignores a partial index's predicate (checked with 1.0.0: a `where scope = 'name'` index counted
-- every row of the table), so each (SKB, scope) gets a table of its own: stark.lexbm25_<hash>__skb<id>,
-- named after a hash of the scope (field names are free text) and following the `__skb<id>` convention
-- by which dropping or replacing an SKB drops its per-SKB tables (sql/functions/skb.sql).
create or replace function stark.bm25_table(skb int, scope text) returns text
language sql immutable parallel safe as $$
    select 'lexbm25_' || left(md5(scope), 12) || '__skb' || skb
$$;
comment on function stark.bm25_table(int, text) is
    'The name (in schema stark) of the pg_textsearch table of one lexical scope of an SKB.';

create or replace function stark.bm25_index(skb int, scope text) returns text
language sql immutable parallel safe as $$
    select 'lexbm25i_' || left(md5(scope), 12) || '__skb' || skb
$$;
comment on function stark.bm25_index(int, text) is
    'The name (in schema stark) of the pg_textsearch BM25 index over stark.bm25_table(skb, scope).';

-- Bring one scope's postings up to date: re-tokenise documents that are new or whose text changed,
-- remove documents that are gone, then recompute the scope's statistics. Returns the number of
-- documents (re)indexed, so a second run on unchanged data returns 0.
drop function if exists stark.lex_refresh(int, text);
create or replace function stark.lex_refresh(skb int, target_scope text, textsearch boolean default null)
returns int
language plpgsql as $$
declare
    changed int;
    tbl text := stark.bm25_table(skb, target_scope);
    idx text := stark.bm25_index(skb, target_scope);
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

    -- the scope's pg_textsearch table: kept in step once it exists; built (bulk insert, then the
    -- index, which is much faster than indexing row by row) when asked, or by default when this
    -- database has the extension. pg_textsearch maintains its index on insert and delete.
    if to_regclass(format('stark.%I', tbl)) is not null then
        execute format('delete from stark.%I t using lex_stale s where t.node_id = s.node_id', tbl);
        execute format('insert into stark.%I (node_id, doc_hash, body) select node_id, doc_hash, body from lex_todo', tbl);
    elsif coalesce(textsearch, exists (select 1 from pg_extension where extname = 'pg_textsearch')) then
        execute format('create table stark.%I (node_id bigint primary key, doc_hash text not null, body text not null)', tbl);
        execute format('comment on table stark.%I is %L', tbl,
                       format('pg_textsearch BM25 documents of SKB %s, scope %s (kept by stark.lex_refresh)', skb, target_scope));
        execute format('insert into stark.%I (node_id, doc_hash, body) select node_id, doc_hash, body from lex_current', tbl);
        execute format('create index %I on stark.%I using bm25 (body) with (text_config = ''english'', k1 = 1.2, b = 0.75)',
                       idx, tbl);
    end if;

    drop table lex_current, lex_stale, lex_todo, lex_terms, lex_touched;
    return changed;
end
$$;
comment on function stark.lex_refresh(int, text, boolean) is
    'Re-indexes the new or changed documents of one lexical scope of an SKB and refreshes its statistics (and its pg_textsearch index).';

-- Drops the pg_textsearch tables of an SKB's scopes other than `keep` (all of them for an empty
-- array): scopes no longer indexed, or the whole engine turned off (`stark-pg index --no-textsearch`).
create or replace function stark.drop_bm25_tables(skb int, keep text[] default '{}') returns int
language plpgsql as $$
declare
    tbl record;
    dropped int := 0;
begin
    for tbl in
        select c.relname from pg_class c join pg_namespace ns on ns.oid = c.relnamespace
        where ns.nspname = 'stark' and c.relkind = 'r' and c.relname like 'lexbm25\_%\_\_skb' || skb
          and c.relname <> all (select stark.bm25_table(skb, s) from unnest(coalesce(keep, '{}')) s)
    loop
        execute format('drop table stark.%I', tbl.relname);
        dropped := dropped + 1;
    end loop;
    return dropped;
end
$$;
comment on function stark.drop_bm25_tables(int, text[]) is
    'Drops the pg_textsearch tables of an SKB''s lexical scopes other than those kept.';

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
-- ranking. Scores every document of each given scope that holds at least one query term, in one pass:
-- mFAR and learned fusion score a query against eleven fields or more, and one statement that reads the
-- query's terms once, each (scope, term) statistic by its key, then the postings, costs far less than
-- one call per scope with the same scores (docs/mfar.md). The term weights are materialised so that the
-- planner probes lex_term once per (scope, term), not once per posting.
-- Each document's terms are summed in one order (by term), whatever the plan: floating-point sums
-- in another order differ in the last bit, enough to reorder names whose scores tie exactly (one
-- query term each, the same length), so that learned fusion's linked entities would depend on the
-- plan (seen on the slice: the fifth of five tied names changed with the plan). The order costs a
-- little of the pass. Callers order and limit.
create or replace function stark.bm25_scores_scopes(skb int, target_scopes text[], query text,
                                                    k1 double precision default 1.2, b double precision default 0.75)
returns table (scope text, node_id bigint, score double precision)
language sql stable parallel safe as $$
    with st as (select s.scope, s.n_docs::double precision as n,
                       s.total_len::double precision / greatest(s.n_docs, 1) as avgdl
                from stark.lex_stats s where s.skb_id = skb and s.scope = any(target_scopes)),
    t as materialized (
        select st.scope, st.avgdl, q.term, q.qtf * ln(1 + (st.n - lt.df + 0.5) / (lt.df + 0.5)) as weight
        from st cross join stark.query_terms(query) q
        join stark.lex_term lt on lt.skb_id = skb and lt.scope = st.scope and lt.term = q.term)
    select t.scope, p.node_id, sum(t.weight * p.tf / (p.tf + k1 * (1 - b + b * p.len / t.avgdl)) order by t.term)
    from t
    join stark.lex_posting p on p.skb_id = skb and p.scope = t.scope and p.term = t.term
    group by t.scope, p.node_id
$$;
comment on function stark.bm25_scores_scopes(int, text[], text, double precision, double precision) is
    'BM25 of every matching document of several scopes (by skb_id) in one pass, as stark.bm25_scores per scope.';

-- One scope's BM25 (the formula above).
create or replace function stark.bm25_scores(skb int, target_scope text, query text,
                                             k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language sql stable parallel safe as $$
    select s.node_id, s.score from stark.bm25_scores_scopes(skb, array[target_scope], query, k1, b) s
$$;
comment on function stark.bm25_scores(int, text, text, double precision, double precision) is
    'BM25 of every matching document of one scope (by skb_id); see stark.bm25 for the ranked API.';

-- BM25 of the given documents only, as stark.bm25_scores computes it (same statistics, same formula):
-- each query term's postings are probed for those nodes through the postings' primary key rather
-- than read whole. For scoring a known candidate set (mFAR's union of shortlists) when the shortlist
-- came from elsewhere (the pg_textsearch index): pg_textsearch can score a given row
-- (`body <@> to_bm25query(query, index)`), but it tokenises that row's text on every call, much
-- slower than these probes on whole documents.
create or replace function stark.bm25_rows(skb int, target_scope text, query text, node_ids bigint[],
                                           k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language sql stable parallel safe as $$
    with st as (select n_docs::double precision as n, total_len::double precision / greatest(n_docs, 1) as avgdl
                from stark.lex_stats where skb_id = skb and scope = target_scope),
    t as (select q.term, q.qtf * ln(1 + (st.n - lt.df + 0.5) / (lt.df + 0.5)) as weight
          from stark.query_terms(query) q
          join stark.lex_term lt on lt.skb_id = skb and lt.scope = target_scope and lt.term = q.term
          cross join st)
    select p.node_id, sum(t.weight * p.tf / (p.tf + k1 * (1 - b + b * p.len / st.avgdl)) order by t.term)
    from t
    join stark.lex_posting p on p.skb_id = skb and p.scope = target_scope and p.term = t.term
                            and p.node_id = any(node_ids)
    cross join st
    group by p.node_id
$$;
comment on function stark.bm25_rows(int, text, text, bigint[], double precision, double precision) is
    'BM25 (as stark.bm25_scores) of the given documents of one scope (by skb_id) that hold a query term.';

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

-- The BM25 engine a ranked search uses: 'textsearch' (the scope's pg_textsearch index: block-max WAND
-- skips to the postings that can still enter the top k) or 'sql' (stark.bm25_scores: exact, every
-- posting of every query term). 'auto' takes the index when the scope has one built with the
-- requested k1 and b (they are index settings in pg_textsearch), the SQL engine otherwise. On a hot
-- standby (`stark-pg db replica add`) always the SQL engine: pg_textsearch 1.0.0 writes parts of its
-- index without WAL, so a standby's copy of it cannot be read (its pages are missing there), while
-- stark.lex_posting replicates like any table; both engines rank alike, so a standby ranks as the primary.
create or replace function stark.bm25_engine(skb int, scope text, engine text default 'auto',
                                             k1 double precision default 1.2, b double precision default 0.75)
returns text
language plpgsql stable as $$
declare
    idx regclass := to_regclass('stark.' || quote_ident(stark.bm25_index(skb, scope)));   -- NULL for a NULL skb
    settings text[];
    fits boolean;
begin
    if engine is null or engine not in ('auto', 'textsearch', 'sql') then
        raise exception 'unknown BM25 engine %', coalesce(quote_literal(engine), 'NULL')
            using errcode = 'invalid_parameter_value', hint = 'engines: auto, textsearch, sql';
    end if;
    if engine = 'sql' then
        return 'sql';
    end if;
    if pg_is_in_recovery() then
        if engine = 'auto' then
            return 'sql';
        end if;
        raise exception 'a hot standby cannot read the pg_textsearch index of scope %', quote_literal(scope)
            using errcode = 'feature_not_supported',
                  hint = 'use engine sql (or auto) on a standby: pg_textsearch 1.0.0 does not replicate its index';
    end if;
    if idx is not null then
        select c.reloptions into settings from pg_class c where c.oid = idx;
        fits := abs(k1 - coalesce((select split_part(o, '=', 2)::float8 from unnest(settings) o where o like 'k1=%'), 1.2)) < 1e-9
            and abs(b - coalesce((select split_part(o, '=', 2)::float8 from unnest(settings) o where o like 'b=%'), 0.75)) < 1e-9;
        if fits then
            return 'textsearch';
        end if;
    end if;
    if engine = 'auto' then
        return 'sql';
    end if;
    if idx is null then
        perform stark.bm25_index_required(skb, scope);          -- raises: the scope has no index
    end if;
    raise exception 'the pg_textsearch index of scope % was built with %, not k1=% b=%', quote_literal(scope),
        array_to_string(settings, ' '), k1, b
        using errcode = 'invalid_parameter_value', hint = 'use engine sql (or auto) for other k1 and b';
end
$$;
comment on function stark.bm25_engine(int, text, text, double precision, double precision) is
    'Which BM25 engine (textsearch or sql) a ranked search of one scope uses for the requested engine, k1 and b.';

-- The pg_textsearch index of one lexical scope, or an error saying that the scope has none (one
-- message for every caller that needs the index: stark.bm25_engine with engine textsearch,
-- stark.bm25_index_scan).
create or replace function stark.bm25_index_required(skb int, scope text) returns regclass
language plpgsql stable as $$
declare
    idx regclass := to_regclass('stark.' || quote_ident(stark.bm25_index(skb, scope)));
begin
    if idx is null then
        raise exception 'scope % of SKB % has no pg_textsearch index', coalesce(quote_literal(scope), 'NULL'),
                        coalesce(skb::text, 'NULL')
            using errcode = 'invalid_parameter_value',
                  hint = 'run `stark-pg index` on a server with pg_textsearch, or use engine sql';
    end if;
    return idx;
end
$$;
comment on function stark.bm25_index_required(int, text) is
    'Internal: the pg_textsearch index of one lexical scope (by skb_id), or an error naming the scope.';

-- The top k of one scope through its pg_textsearch index, with the score the index scan computed
-- (bm25_get_current_score(): negative, as the index orders ascending, and including Okapi's k1 + 1).
-- The query text goes into the statement as a quoted literal, not a bound parameter, and sequential
-- scans are off for this function: pg_textsearch's planner hook hands over the scan's score only for
-- a literal query text and an index scan (a small table's seq scan and sort gave 0 for every row).
-- Writing `body <@> query` in the select list instead would score every returned row again,
-- tokenising its text, far slower than reading the scan's score. A bound query text
-- would also have to go through to_bm25query(text, index): `body <@> $1` cannot find its index.
create or replace function stark.bm25_index_scan(skb int, target_scope text, query text, k int)
returns table (node_id bigint, index_score double precision)
language plpgsql stable set enable_seqscan = off as $$
begin
    perform stark.bm25_index_required(skb, target_scope);
    return query execute format(
        'select t.node_id, bm25_get_current_score()::double precision from stark.%I t
         order by t.body <@> to_bm25query(%L, %L) limit $1',
        stark.bm25_table(skb, target_scope), coalesce(query, ''), 'stark.' || stark.bm25_index(skb, target_scope))
        using greatest(k, 0);
end
$$;
comment on function stark.bm25_index_scan(int, text, text, int) is
    'Top-k rows of one lexical scope''s pg_textsearch index (by skb_id) with the scan''s own (negative) BM25 scores.';

-- The top k of one scope through its pg_textsearch index, ranked as the SQL engine ranks it: by the
-- exact score (stark.bm25_rows, equal to stark.bm25_scores' to the bit), then by node id. The scan's
-- own top k would not do: it breaks ties its own way (a node scoring exactly the k-th's score could be
-- in one engine's top k and not the other's; synthetic SKBs have hundreds of identical scores), and it
-- scores with compressed document lengths, which can reorder nodes whose exact scores are close. So
-- the scan fetches more than k rows, they are scored exactly, and the fetch grows until no row left
-- out can rank in the top k. A row the scan did not reach has an index score of at most the last
-- fetched one's, and its exact score is taken to be at most that times a bound: in an index built at
-- once, a row's index score is never below its exact score beyond float4 rounding (lengths are rounded
-- down when compressed; tests/test_textsearch.py checks it), so the bound is 1 + 1e-6 and the cut is
-- exact. After incremental builds pg_textsearch's statistics still count replaced rows (its
-- total_docs, even after a vacuum), which moves every index score by about the same factor: when the
-- first fetch shows rows scoring exactly above their index score, the bound is the largest such ratio
-- plus 1%. Each larger fetch re-scores only the rows whose index score can still reach the k-th exact
-- score found so far (it only grows), so a tie of thousands of rows costs one scan of them, and exact
-- scores of the tie only. A tie whose next fetch would be more rows than the SQL engine reads postings
-- for the query (the `type` scope, where every node of a type scores alike) is ranked by the SQL
-- engine's pass instead: the same rows, for less.
create or replace function stark.bm25_index_top(skb int, target_scope text, query text, k int,
                                                k1 double precision default 1.2, b double precision default 0.75)
returns table (node_id bigint, score double precision)
language plpgsql stable as $$
declare
    wanted int := stark.check_count('bm25', 'k', k, 0, stark.k_max());
    fetched int := wanted + (wanted + 1) / 2 + 1;     -- a margin beyond k: near-ties at the edge are common
    got int;
    ids bigint[];
    index_scores double precision[];                 -- on the SQL engine's scale
    lowest double precision;                         -- the last fetched index score
    bound double precision := 1;                     -- exact score <= index score * bound
    floor_score double precision := 0;               -- rows scoring less in the index cannot reach the top k
    exact_by_id jsonb;
    ranked bigint[];
    scores double precision[];
    postings bigint;                                 -- the SQL engine's postings for this query and scope
begin
    perform stark.check_number('bm25', 'k1', k1, 0, 1000);
    perform stark.check_number('bm25', 'b', b, 0, 1);
    if wanted = 0 then
        return;
    end if;
    -- Each step is a statement of its own, the node ids passed as a value: inside one statement (the ids
    -- as a subquery) the planner could not see how few they are and read the frequent terms' postings
    -- whole. The first fetch, scored exactly, also measures the bound.
    select coalesce(array_agg(t.node_id), '{}'), coalesce(array_agg(-t.index_score / (k1 + 1)), '{}'),
           count(*), min(-t.index_score / (k1 + 1))
    into ids, index_scores, got, lowest
    from stark.bm25_index_scan(skb, target_scope, query, fetched) t
    where t.index_score < 0;                         -- rows beyond the matching ones score 0
    select coalesce(array_agg(r.node_id order by r.score desc, r.node_id), '{}'),
           coalesce(array_agg(r.score order by r.score desc, r.node_id), '{}'),
           coalesce(jsonb_object_agg(r.node_id, r.score), '{}')
    into ranked, scores, exact_by_id
    from stark.bm25_rows(skb, target_scope, query, ids, k1, b) r;
    for i in 1 .. got loop
        bound := greatest(bound, (exact_by_id ->> ids[i]::text)::double precision / index_scores[i]);
    end loop;
    bound := case when bound <= 1 + 1e-6 then 1 + 1e-6 else bound * 1.01 end;
    while got = fetched and not coalesce(scores[wanted] > lowest * bound, false) loop    -- fewer than k: go on
        floor_score := coalesce(scores[wanted] / bound, floor_score);
        fetched := least(fetched::bigint * 8, 2147483647);      -- a tie at the k-th spans hundreds of rows
        -- A tie of tens of thousands (every node of a type ties in the `type` scope) would be scanned
        -- row by row: where the next fetch is more rows than the SQL engine reads postings, the SQL
        -- engine's pass gives the same top k for less (a row scanned costs about a posting read).
        if postings is null then
            select coalesce(sum(lt.df), 0) into postings
            from stark.query_terms(query) q
            join stark.lex_term lt on lt.skb_id = skb and lt.scope = target_scope and lt.term = q.term;
        end if;
        if fetched >= postings then
            return query select s.node_id, s.score from stark.bm25_scores(skb, target_scope, query, k1, b) s
                         order by s.score desc, s.node_id limit wanted;
            return;
        end if;
        select coalesce(array_agg(t.node_id) filter (where -t.index_score / (k1 + 1) >= floor_score), '{}'),
               count(*), min(-t.index_score / (k1 + 1))
        into ids, got, lowest
        from stark.bm25_index_scan(skb, target_scope, query, fetched) t
        where t.index_score < 0;
        select coalesce(array_agg(r.node_id order by r.score desc, r.node_id), '{}'),
               coalesce(array_agg(r.score order by r.score desc, r.node_id), '{}')
        into ranked, scores
        from stark.bm25_rows(skb, target_scope, query, ids, k1, b) r;
    end loop;
    return query select u.node_id, u.score from unnest(ranked[1:wanted], scores[1:wanted]) as u(node_id, score);
end
$$;
comment on function stark.bm25_index_top(int, text, text, int, double precision, double precision) is
    'Top-k nodes of one lexical scope (by skb_id) through its pg_textsearch index, with the SQL engine''s exact scores and order (score, then node id).';

-- Top k of one scope by BM25 with the engine stark.bm25_engine picks. Both engines return the same
-- rows with the same scores, ordered by score (descending), then node id: the SQL engine scores every
-- matching document, the index path its scan's candidates only (stark.bm25_index_top).
create or replace function stark.bm25_top(skb int, target_scope text, query text, k int default 10,
                                          k1 double precision default 1.2, b double precision default 0.75,
                                          engine text default 'auto')
returns table (node_id bigint, score double precision)
language plpgsql stable as $$
begin
    perform stark.check_count('bm25', 'k', k, 0, stark.k_max());
    perform stark.check_number('bm25', 'k1', k1, 0, 1000);     -- beyond them BM25's arithmetic overflows to NaN
    perform stark.check_number('bm25', 'b', b, 0, 1);
    if stark.bm25_engine(skb, target_scope, engine, k1, b) = 'sql' then
        return query select s.node_id, s.score from stark.bm25_scores(skb, target_scope, query, k1, b) s
                     order by s.score desc, s.node_id limit k;
        return;
    end if;
    return query select s.node_id, s.score from stark.bm25_index_top(skb, target_scope, query, k, k1, b) s;
end
$$;
comment on function stark.bm25_top(int, text, text, int, double precision, double precision, text) is
    'Top-k nodes of one lexical scope (by skb_id) by BM25, through pg_textsearch or the SQL engine (see stark.bm25_engine).';

drop function if exists stark.bm25(text, text, int, text, double precision, double precision);
create or replace function stark.bm25(skb_name text, query text, k int default 10, field text default null,
                                      k1 double precision default 1.2, b double precision default 0.75,
                                      engine text default 'auto')
returns table (node_id bigint, score double precision)
language sql stable as $$
    select s.node_id, s.score
    from stark.bm25_top(stark.require_scope(skb_name, coalesce(field, '*')), coalesce(field, '*'), query, k, k1, b, engine) s
$$;
comment on function stark.bm25(text, text, int, text, double precision, double precision, text) is
    'Top-k nodes of the named SKB by BM25 over whole documents, or over one field (''name'' or a text field); engine auto, textsearch or sql.';
