-- Migration 0027's downgrade (migrations/versions/0027_diskann_rescore.py), run by it as one script:
-- 0026's two functions come back: DiskANN scans re-score pgvectorscale's default number again.
-- What it restores:
--   stark.vector_search_settings and stark.vector_search_restore (sql/functions/dense.sql) as of 0026, verbatim

-- The size of the candidate list an index search keeps (HNSW's hnsw.ef_search, DiskANN's
-- diskann.query_search_list_size): the session's `stark.ef_search` when set (what `-o ef_search=N`
-- does with SET LOCAL in the search transaction; 1 to 1000), else max(`at_least`, 100, the current
-- setting). Set for the transaction (set_config(..., true), as SET LOCAL); HNSW scans become iterative
-- (hnsw.iterative_scan = relaxed_order), so a list smaller than the rows asked for still yields them.
-- Returns the settings to restore afterwards (stark.vector_search_restore).
create or replace function stark.vector_search_settings(method text, at_least int) returns text[]
language plpgsql as $$
declare
    raw text := nullif(current_setting('stark.ef_search', true), '');
    wanted int;
    knob text := case when method = 'diskann' then 'diskann.query_search_list_size' else 'hnsw.ef_search' end;
    saved text[] := array[knob, coalesce(current_setting(knob, true), case when method = 'diskann' then '100' else '40' end),
                          'hnsw.iterative_scan', coalesce(current_setting('hnsw.iterative_scan', true), 'off')];
begin
    if raw is not null then
        if raw !~ '^\s*[0-9]{1,4}\s*$' or raw::int not between 1 and 1000 then
            raise exception 'stark.ef_search must be an integer from 1 to 1000, not %', quote_literal(raw)
                using errcode = 'invalid_parameter_value';
        end if;
        wanted := raw::int;
    else
        wanted := greatest(at_least, 100, coalesce(nullif(saved[2], '')::int, 40));
    end if;
    perform set_config(knob, least(wanted, 1000)::text, true);
    if method is distinct from 'diskann' then
        perform set_config('hnsw.iterative_scan', 'relaxed_order', true);
    end if;
    return saved;
end
$$;
comment on function stark.vector_search_settings(text, int) is
    'Internal: sets the index search list size (stark.ef_search, or at least at_least) for the transaction; returns what to restore.';

create or replace function stark.vector_search_restore(saved text[]) returns void
language plpgsql as $$
begin
    for i in 1 .. coalesce(array_length(saved, 1), 0) / 2 loop
        if saved[2 * i - 1] in ('hnsw.ef_search', 'hnsw.iterative_scan', 'diskann.query_search_list_size') then
            perform set_config(saved[2 * i - 1], saved[2 * i], true);
        end if;
    end loop;
end
$$;
comment on function stark.vector_search_restore(text[]) is
    'Internal: puts back the settings stark.vector_search_settings changed.';
