-- Migration 0029's downgrade (migrations/versions/0029_bm25_index_required.py), run by it as one script:
-- 0028's stark.bm25_engine and stark.bm25_index_scan come back; stark.bm25_index_required goes.
-- What it restores:
--   stark.bm25_engine (sql/functions/lexical.sql) as of 0028, verbatim
--   stark.bm25_index_scan (sql/functions/lexical.sql) as of 0028, verbatim

-- The BM25 engine a ranked search uses: 'textsearch' (the scope's pg_textsearch index: block-max WAND
-- skips to the postings that can still enter the top k) or 'sql' (stark.bm25_scores: exact, every
-- posting of every query term). 'auto' takes the index when the scope has one built with the
-- requested k1 and b (they are index settings in pg_textsearch), the SQL engine otherwise.
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
        raise exception 'scope % of SKB % has no pg_textsearch index', quote_literal(scope), skb
            using errcode = 'invalid_parameter_value',
                  hint = 'run `stark-pg index` on a server with pg_textsearch, or use engine sql';
    end if;
    raise exception 'the pg_textsearch index of scope % was built with %, not k1=% b=%', quote_literal(scope),
        array_to_string(settings, ' '), k1, b
        using errcode = 'invalid_parameter_value', hint = 'use engine sql (or auto) for other k1 and b';
end
$$;
comment on function stark.bm25_engine(int, text, text, double precision, double precision) is
    'Which BM25 engine (textsearch or sql) a ranked search of one scope uses for the requested engine, k1 and b.';

-- The top k of one scope through its pg_textsearch index, with the score the index scan computed
-- (bm25_get_current_score(): negative, as the index orders ascending, and including Okapi's k1 + 1).
-- The query text goes into the statement as a quoted literal, not a bound parameter, and sequential
-- scans are off for this function: pg_textsearch's planner hook hands over the scan's score only for
-- a literal query text and an index scan (a small table's seq scan and sort gave 0 for every row).
-- Writing `body <@> query` in the select list instead would score every returned row again,
-- tokenising its text (the slice's top 1,000: 151 ms against 2.6 ms, measured). A bound query text
-- would also have to go through to_bm25query(text, index): `body <@> $1` cannot find its index.
create or replace function stark.bm25_index_scan(skb int, target_scope text, query text, k int)
returns table (node_id bigint, index_score double precision)
language plpgsql stable set enable_seqscan = off as $$
declare
    tbl text := stark.bm25_table(skb, target_scope);
begin
    if to_regclass(format('stark.%I', tbl)) is null then
        raise exception 'scope % of SKB % has no pg_textsearch index', coalesce(quote_literal(target_scope), 'NULL'),
                        coalesce(skb::text, 'NULL')
            using hint = 'run `stark-pg index` on a server with pg_textsearch, or use engine sql';
    end if;
    return query execute format(
        'select t.node_id, bm25_get_current_score()::double precision from stark.%I t
         order by t.body <@> to_bm25query(%L, %L) limit $1',
        tbl, coalesce(query, ''), 'stark.' || stark.bm25_index(skb, target_scope))
        using greatest(k, 0);
end
$$;
comment on function stark.bm25_index_scan(int, text, text, int) is
    'Top-k rows of one lexical scope''s pg_textsearch index (by skb_id) with the scan''s own (negative) BM25 scores.';

drop function if exists stark.bm25_index_required(int, text);
