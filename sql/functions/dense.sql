-- Dense retrieval in SQL: the chunks multi-vector search embeds, and the searches themselves.
-- Query vectors come from the caller (Python embeds the query text: `stark_pg.embed.encode_query`);
-- everything else happens here. Scores are cosine similarities (1 - cosine distance).
--
-- Vectors of model M live in the tables named by stark.embedding_model (see sql/schema/0003_dense.sql),
-- with one partial HNSW index per SKB (`where skb_id = <id>`). PostgreSQL uses a partial index only
-- when the query states that predicate with a literal, so the searches below build their SQL text
-- with format() and the SKB's id inlined; the query vector stays a bound parameter.

-- ---------------------------------------------------------------------------------------------
-- Chunks: what multi-vector search embeds, several pieces per node.
--   chunk 0          kind 'name'                "name: SMAD3\ntype: gene/protein"
--   then per field   kind 'field:<field>'       "<field>: <piece>", fields in name order; a field is
--                    cut at word boundaries into pieces of about `chunk_chars` characters (a word goes
--                    to the piece in which it starts, so a piece can overrun by one word)
--   then per relation kind 'relation:<relation>' "<relation>: name, name, ..." (the first
--                    `max_neighbors` neighbours by node id, as stark.render_document lists them)
-- `nodes` restricts the output to some nodes (NULL: every node of the SKB); chunk_no counts from 0
-- in the order above. Whitespace inside a field is collapsed to single spaces.
create or replace function stark.render_chunks(skb int, nodes bigint[] default null,
                                               with_relations boolean default true, max_neighbors int default 25,
                                               chunk_chars int default 512)
returns table (node_id bigint, chunk_no int, kind text, body text)
language sql stable as $$
    with pieces as (
        select n.node_id, 0 as part, 'name' as kind, 0::bigint as piece,
               concat_ws(E'\n', 'name: ' || n.name, 'type: ' || n.type) as body
        from stark.node n
        where n.skb_id = skb and (nodes is null or n.node_id = any (nodes))
        union all
        select w.node_id, 1, 'field:' || w.field, w.piece,
               w.field || ': ' || string_agg(w.word, ' ' order by w.ord)
        from (select f.node_id, f.field, t.word, t.ord,
                     (sum(length(t.word) + 1) over (partition by f.node_id, f.field order by t.ord)
                      - length(t.word) - 1) / greatest(chunk_chars, 1) as piece
              from stark.node_field f
              cross join lateral regexp_split_to_table(f.body, '\s+') with ordinality as t(word, ord)
              where f.skb_id = skb and (nodes is null or f.node_id = any (nodes)) and t.word <> '') w
        group by w.node_id, w.field, w.piece
        union all
        select e.src, 2, 'relation:' || e.relation, 0,
               e.relation || ': ' || string_agg(coalesce(m.name, e.dst::text), ', ' order by m.name)
        from (select e.src, e.relation, e.dst,
                     row_number() over (partition by e.src, e.relation order by e.dst) as i
              from stark.edge e
              where with_relations and e.skb_id = skb and (nodes is null or e.src = any (nodes))) e
        left join stark.node m on m.skb_id = skb and m.node_id = e.dst
        where e.i <= max_neighbors
        group by e.src, e.relation)
    select p.node_id, (row_number() over (partition by p.node_id order by p.part, p.kind, p.piece) - 1)::int,
           p.kind, p.body
    from pieces p
$$;
comment on function stark.render_chunks(int, bigint[], boolean, int, int) is
    'The chunks multi-vector search embeds (by skb_id): name+type, pieces of each text field, one per relation.';

create or replace function stark.document_chunks(skb_name text, node bigint, with_relations boolean default true)
returns table (chunk_no int, kind text, body text)
language sql stable as $$
    select c.chunk_no, c.kind, c.body
    from stark.render_chunks(stark.require_skb(skb_name), array[node], with_relations) c
    order by c.chunk_no
$$;
comment on function stark.document_chunks(text, bigint, boolean) is
    'The chunks of one node of the named SKB, as multi-vector search embeds them (see stark.render_chunks).';

-- ---------------------------------------------------------------------------------------------
-- Shared checks: the model's tables, and that the SKB has vectors in them.
create or replace function stark.dense_target(skb_name text, model text, query vector, chunks boolean,
                                              out skb int, out tbl text)
language plpgsql stable as $$
declare
    m stark.embedding_model;
    present boolean;
begin
    skb := stark.skb_id(skb_name);
    if skb is null then
        raise exception 'no SKB named %', coalesce(quote_literal(skb_name), 'NULL');
    end if;
    if model is null then
        raise exception 'the embedding model must not be NULL (models: %)',
            coalesce((select string_agg(e.name, ', ' order by e.name) from stark.embedding_model e), 'none')
            using errcode = 'invalid_parameter_value';
    end if;
    select * into m from stark.embedding_model e where e.name = model;
    if not found then
        raise exception 'no vectors of model % in this database (models: %)', quote_literal(model),
            coalesce((select string_agg(e.name, ', ' order by e.name) from stark.embedding_model e), 'none')
            using hint = 'run `stark-pg index ' || skb_name || ' --model ' || model || '`';
    end if;
    if query is not null and vector_dims(query) <> m.dim then
        raise exception 'the query vector has % dimensions, model % has %', vector_dims(query),
            quote_literal(model), m.dim;
    end if;
    tbl := case when chunks then m.chunk_table else m.doc_table end;
    execute format('select exists (select 1 from stark.%I where skb_id = %s)', tbl, skb) into present;
    if not present then
        raise exception 'SKB % has no % vectors of model %', quote_literal(skb_name),
            case when chunks then 'chunk' else 'document' end, quote_literal(model)
            using hint = 'run `stark-pg index ' || skb_name || '`' || case when chunks then ' with --multi-vector' else '' end;
    end if;
end
$$;
comment on function stark.dense_target(text, text, vector, boolean) is
    'Internal: resolves an SKB and a model to the vector table to search, with helpful errors.';

-- ---------------------------------------------------------------------------------------------
-- The approximate index over one SKB's vectors in table `tbl`, as `stark-pg index` built it (its
-- settings: --vector-index, --storage, --hnsw-m, --hnsw-ef-construction): method 'hnsw' or 'diskann'
-- (pgvectorscale), storage 'vector' (single precision) or 'halfvec' (the index holds half-precision
-- copies, `vec::halfvec(dim)`; the table keeps single precision), and the vectors' dimension. All
-- NULL when the SKB has no such index (searches are then exact scans). Read from the catalog, so it is
-- what exists, not what was asked for.
create or replace function stark.vector_index(tbl text, skb int, out method text, out storage text, out dim int)
language sql stable as $$
    -- one row always (NULLs without an index), so that `ix := stark.vector_index(...)` in PL/pgSQL gets a
    -- record whose fields can be read: a version whose vectors were carried over by a replace has none
    -- until its refresh builds it, and is searched exactly meanwhile
    select found.* from (select 1) one left join lateral (
        select a.amname::text,
               case when format_type(o.opcintype, null) = 'halfvec' then 'halfvec' else 'vector' end,
               (select c.atttypmod from pg_attribute c where c.attrelid = x.indrelid and c.attname = 'vec')
        from pg_class i
        join pg_namespace n on n.oid = i.relnamespace and n.nspname = 'stark'
        join pg_index x on x.indexrelid = i.oid
        join pg_am a on a.oid = i.relam
        join pg_opclass o on o.oid = x.indclass[0]
        where i.relname in (tbl || '_hnsw__skb' || skb, tbl || '_diskann__skb' || skb)
        order by i.relname
        limit 1) found on true
$$;
comment on function stark.vector_index(text, int) is
    'Internal: the HNSW or DiskANN index over one SKB''s vectors in a vector table (method, storage, dim), or NULLs.';

-- The distance expression ordering rows of alias `a` by an index of that storage: `a.vec <=> $1`, or
-- over half precision `a.vec::halfvec(dim) <=> $1::halfvec(dim)` (the very expression of the index, or
-- PostgreSQL would not use it).
create or replace function stark.vector_distance(a text, storage text, dim int) returns text
language plpgsql immutable as $$
begin
    if a is null then
        raise exception 'vector_distance alias must not be NULL' using errcode = 'invalid_parameter_value';
    end if;
    return case when storage = 'halfvec' and dim > 0
                then format('%1$I.vec::halfvec(%2$s) <=> $1::halfvec(%2$s)', a, dim)
                else format('%I.vec <=> $1', a) end;
end
$$;
comment on function stark.vector_distance(text, text, int) is
    'Internal: the cosine-distance expression to order by for an index over vector or halfvec storage.';

-- The size of the candidate list an index search keeps (HNSW's hnsw.ef_search, DiskANN's
-- diskann.query_search_list_size): the session's `stark.ef_search` when set (what `-o ef_search=N`
-- does with SET LOCAL in the search transaction; 1 to 1000), else max(`at_least`, 100, the current
-- setting). Set for the transaction (set_config(..., true), as SET LOCAL); HNSW scans become iterative
-- (hnsw.iterative_scan = relaxed_order), so a list smaller than the rows asked for still yields them.
-- A DiskANN scan returns its candidates in the order of their compressed (binary-quantised) distances
-- and re-scores only the first diskann.query_rescore (pgvectorscale's default: 50) with the full vectors:
-- that number, not the list size, bounds its recall (docs/benchmarks.md has the figures), so it is set
-- to the same size as the list.
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
    else
        saved := saved || array['diskann.query_rescore', coalesce(current_setting('diskann.query_rescore', true), '50')];
        perform set_config('diskann.query_rescore', least(wanted, 1000)::text, true);
    end if;
    return saved;
end
$$;
comment on function stark.vector_search_settings(text, int) is
    'Internal: sets the index search list size (stark.ef_search, or at least at_least; DiskANN: its rescored candidates too) for the transaction; returns what to restore.';

create or replace function stark.vector_search_restore(saved text[]) returns void
language plpgsql as $$
begin
    for i in 1 .. coalesce(array_length(saved, 1), 0) / 2 loop
        if saved[2 * i - 1] in ('hnsw.ef_search', 'hnsw.iterative_scan', 'diskann.query_search_list_size',
                                'diskann.query_rescore') then
            perform set_config(saved[2 * i - 1], saved[2 * i], true);
        end if;
    end loop;
end
$$;
comment on function stark.vector_search_restore(text[]) is
    'Internal: puts back the settings stark.vector_search_settings changed.';

-- ---------------------------------------------------------------------------------------------
-- VSS: the k nodes whose document vectors are nearest the query (cosine).
-- By default through the SKB's index (HNSW or DiskANN, over vector or halfvec: stark.vector_index),
-- with its candidate list (hnsw.ef_search) raised to max(k, 100) for this call, or set to the
-- session's stark.ef_search (stark.vector_search_settings); pgvector caps it at 1000, so k > 1000 is
-- answered exactly. The index's candidates are returned by their single-precision similarity (a halfvec
-- index orders by half precision; the scores are exact). exact => true scans every vector of the SKB:
-- the ground truth the indexes are measured against.
create or replace function stark.vss(skb_name text, query vector, k int default 10,
                                     model text default 'all-MiniLM-L6-v2', exact boolean default false)
returns table (node_id bigint, score double precision)
language plpgsql stable as $$
declare
    t record := stark.dense_target(skb_name, model, query, false);
    ix record;
    saved text[];
begin
    perform stark.check_count('vss', 'k', k, 0, stark.k_max());
    if query is null or vector_norm(query) = 0 then   -- every similarity would be NULL or NaN: k arbitrary nodes
        raise exception 'vss query must be a vector of non-zero length, not %',
            case when query is null then 'NULL' else 'the zero vector' end using errcode = 'invalid_parameter_value';
    end if;
    if exact or k > 1000 then
        return query execute format(
            'select d.node_id, 1 - (d.vec <=> $1) as score from stark.%I d where d.skb_id = %s '
            'order by score desc, d.node_id limit %s', t.tbl, t.skb, k) using query;
    else
        ix := stark.vector_index(t.tbl, t.skb);
        saved := stark.vector_search_settings(ix.method, k);
        return query execute format(
            'select s.node_id, s.score from (select d.node_id, 1 - (d.vec <=> $1) as score from stark.%I d '
            'where d.skb_id = %s order by %s limit %s) s order by s.score desc, s.node_id',
            t.tbl, t.skb, stark.vector_distance('d', ix.storage, ix.dim), k) using query;
        perform stark.vector_search_restore(saved);
    end if;
end
$$;
comment on function stark.vss(text, vector, int, text, boolean) is
    'Top-k nodes of the named SKB by cosine similarity of their document vector to `query` (HNSW/DiskANN, or exact).';

-- ---------------------------------------------------------------------------------------------
-- Multi-VSS (STaRK's multi-vector baseline): a node's score aggregates the similarities of its chunks,
-- agg => 'max' (its best chunk) or 'mean' (the mean of its `top` best chunks; fewer if it has fewer).
-- Candidates: the nodes owning the `pool` chunks nearest the query (default k * 20, through the SKB's
-- chunk index, at most 1000 since hnsw.ef_search is capped there; its candidate list as for stark.vss,
-- at least `pool`); every chunk of every candidate is then scored exactly, so a candidate's aggregate
-- never depends on which of its chunks the index happened to return. exact => true makes every node of
-- the SKB a candidate.
create or replace function stark.multivss(skb_name text, query vector, k int default 10,
                                          model text default 'all-MiniLM-L6-v2', agg text default 'max',
                                          top int default 3, pool int default null, exact boolean default false)
returns table (node_id bigint, score double precision)
language plpgsql stable as $$
declare
    t record;
    ix record;
    saved text[];
    n_pool int := least(coalesce(pool, k * 20), 1000);
    candidates text;
begin
    if agg is null or agg not in ('max', 'mean') then
        raise exception 'multivss agg must be max or mean, not %', coalesce(quote_literal(agg), 'NULL');
    end if;
    if top is null or top < 1 then
        raise exception 'multivss top must be at least 1, not %', coalesce(top::text, 'NULL');
    end if;
    perform stark.check_count('multivss', 'k', k, 0, stark.k_max());
    if pool is not null then
        perform stark.check_count('multivss', 'pool', pool, 1, stark.k_max());
    end if;
    if query is null or vector_norm(query) = 0 then
        raise exception 'multivss query must be a vector of non-zero length, not %',
            case when query is null then 'NULL' else 'the zero vector' end using errcode = 'invalid_parameter_value';
    end if;
    t := stark.dense_target(skb_name, model, query, true);
    if exact then
        candidates := format('select distinct c.node_id from stark.%I c where c.skb_id = %s', t.tbl, t.skb);
    else
        ix := stark.vector_index(t.tbl, t.skb);
        saved := stark.vector_search_settings(ix.method, n_pool);
        candidates := format('select distinct p.node_id from (select c.node_id from stark.%I c where c.skb_id = %s '
                             'order by %s limit %s) p', t.tbl, t.skb, stark.vector_distance('c', ix.storage, ix.dim),
                             n_pool);
    end if;
    return query execute format(
        'with cand as materialized (%s), '
        'scored as (select c.node_id, 1 - (c.vec <=> $1) as s, '
        '                  row_number() over (partition by c.node_id order by c.vec <=> $1) as r '
        '           from cand join stark.%I c on c.skb_id = %s and c.node_id = cand.node_id) '
        'select s.node_id, case when $2 = ''max'' then max(s.s) else avg(s.s) filter (where s.r <= $3) end as score '
        'from scored s group by s.node_id order by score desc, s.node_id limit %s',
        candidates, t.tbl, t.skb, k) using query, agg, top;
    perform stark.vector_search_restore(saved);
end
$$;
comment on function stark.multivss(text, vector, int, text, text, int, int, boolean) is
    'Top-k nodes of the named SKB by their chunks'' similarity to `query`: best chunk (max) or mean of the top chunks.';

-- ---------------------------------------------------------------------------------------------
-- A node's own document vector: lets psql users search "more like this node" without Python.
create or replace function stark.node_vector(skb_name text, node bigint, model text default 'all-MiniLM-L6-v2')
returns vector
language plpgsql stable as $$
declare
    t record := stark.dense_target(skb_name, model, null, false);
    v vector;
begin
    execute format('select d.vec from stark.%I d where d.skb_id = %s and d.node_id = $1', t.tbl, t.skb)
        into v using node;
    return v;
end
$$;
comment on function stark.node_vector(text, bigint, text) is
    'The document vector of one node of the named SKB (NULL if it has none), e.g. for stark.vss(skb, stark.node_vector(...)).';
