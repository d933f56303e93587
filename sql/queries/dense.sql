-- Named statements for dense retrieval: the model registry, build records, and the searches.

-- name: lock_model(name)$
-- Serialises the first registration of a model (and the creation of its tables) until the transaction
-- ends. `$`: run now (without a suffix aiosql returns a lazy cursor that never runs).
select pg_advisory_xact_lock(hashtext('stark-pg embedding model ' || :name));

-- name: find_model(name)^
select model_id, dim, doc_table, chunk_table from stark.embedding_model where name = :name;

-- name: register_model(name, dim)^
-- The tables are named after the new model_id, so the name of any model (a path, a hub id) is safe.
with id as (select nextval(pg_get_serial_sequence('stark.embedding_model', 'model_id'))::int as v)
insert into stark.embedding_model (model_id, name, dim, doc_table, chunk_table)
select v, :name, :dim, 'emb_doc_' || v, 'emb_chunk_' || v from id
returning model_id, dim, doc_table, chunk_table;

-- name: record_build(skb_id, model_id, settings, documents, chunks)!
insert into stark.embedding_build (skb_id, model_id, settings, documents, chunks)
values (:skb_id, :model_id, cast(:settings as jsonb), :documents, :chunks)
on conflict (skb_id, model_id) do update
    set settings = excluded.settings, documents = excluded.documents, chunks = excluded.chunks, built_at = now();

-- name: vss_top(skb, embedding, k, model, exact)
select node_id, score from stark.vss(:skb, :embedding, cast(:k as int), :model, :exact);

-- name: multivss_top(skb, embedding, k, model, agg, top, pool, exact)
select node_id, score from stark.multivss(:skb, :embedding, cast(:k as int), :model, :agg, :top, :pool, :exact);

-- name: vector_indexes(names)
-- The vector indexes of these names: access method, storage (vector or halfvec), and the
-- HNSW build settings from their reloptions (NULL for DiskANN).
select i.relname, a.amname,
       case when format_type(o.opcintype, null) = 'halfvec' then 'halfvec' else 'vector' end as storage,
       (select substring(r from '^m=([0-9]+)$')::int from unnest(i.reloptions) r where starts_with(r, 'm=')) as m,
       (select substring(r from '^ef_construction=([0-9]+)$')::int from unnest(i.reloptions) r
        where starts_with(r, 'ef_construction=')) as ef_construction
from pg_class i
join pg_namespace n on n.oid = i.relnamespace and n.nspname = 'stark'
join pg_index x on x.indexrelid = i.oid
join pg_am a on a.oid = i.relam
join pg_opclass o on o.oid = x.indclass[0]
where i.relname = any(:names);

-- name: build_settings(skb_id, model_id)$
-- The settings of the last build of an SKB with a model (NULL if none): a re-run reuses its index settings.
select settings from stark.embedding_build where skb_id = :skb_id and model_id = :model_id;

-- name: skb_encoder(skb, model)$
-- The encoder (backend, quantize) an SKB's vectors of a model were built with: its queries are embedded
-- alike. No row: no build; '{}': a build from before encoders were recorded, which used torch.
select coalesce(b.settings -> 'encoder', '{}'::jsonb)
from stark.embedding_build b join stark.embedding_model m on m.model_id = b.model_id
where b.skb_id = stark.skb_id(:skb) and m.name = :model;

-- name: set_build_encoder(skb_id, model_id, encoder)!
-- A build that changes the encoder records it before it re-embeds anything, so that an interrupted
-- build's queries are embedded as the vectors it already replaced (it deleted the others).
update stark.embedding_build set settings = settings || jsonb_build_object('encoder', cast(:encoder as jsonb))
where skb_id = :skb_id and model_id = :model_id;

-- name: builds_of_skb(skb_id)
-- The models an SKB has vectors of, with the settings of their last build (a replacing load
-- refreshes each with the same settings: stark_pg.index.refresh).
select m.name, b.settings
from stark.embedding_build b join stark.embedding_model m on m.model_id = b.model_id
where b.skb_id = :skb_id
order by m.name;

-- name: imported_query_vector(skb, model, query)^
-- For a model whose vectors were imported into the SKB (stark-pg import-embeddings): the model
-- named to embed queries that came without a vector (NULL: none) and the imported vector of the SKB's
-- query with exactly this text (NULL: none). No row for any other model.
select b.settings -> 'imported' ->> 'query_model' as query_model,
       (select v.vec
        from stark.query q
        join stark.query_vector v on v.skb_id = q.skb_id and v.query_id = q.query_id and v.model = m.name
        where q.skb_id = b.skb_id and q.body = :query and v.body_md5 = md5(q.body)
        order by q.query_id
        limit 1) as vec
from stark.embedding_build b
join stark.embedding_model m on m.model_id = b.model_id
where b.skb_id = stark.skb_id(:skb) and m.name = :model and b.settings ? 'imported';

-- name: model_builds(model_id)
-- Every SKB's last build with a model, with its settings (an import refuses a model stark-pg computes).
select s.name, b.settings
from stark.embedding_build b join stark.skb s on s.skb_id = b.skb_id
where b.model_id = :model_id;

-- name: known_node_ids(skb_id, node_ids)
-- Which of these ids are nodes of the SKB.
select node_id from stark.node where skb_id = :skb_id and node_id = any(:node_ids);

-- name: known_query_ids(skb_id, query_ids)
-- Which of these ids are queries of the SKB.
select query_id from stark.query where skb_id = :skb_id and query_id = any(:query_ids);

-- name: delete_query_vectors(skb_id, model)!
delete from stark.query_vector where skb_id = :skb_id and model = :model;

-- name: import_query_vectors(skb_id, model, query_ids, vecs)!
-- Imported query vectors, each tied to the text of its query as loaded (body_md5).
insert into stark.query_vector (skb_id, query_id, model, body_md5, vec)
select q.skb_id, q.query_id, :model, md5(q.body), u.vec
from unnest(cast(:query_ids as bigint[]), cast(:vecs as vector[])) as u(query_id, vec)
join stark.query q on q.skb_id = :skb_id and q.query_id = u.query_id
on conflict (skb_id, query_id, model) do update set body_md5 = excluded.body_md5, vec = excluded.vec;

-- name: vector_coverage(skb_id, model)^
-- The SKB's nodes and queries, and how many of its queries have a vector of the model (an import's
-- report: what a search with the imported model can and cannot reach).
select (select count(*) from stark.node n where n.skb_id = :skb_id),
       (select count(*) from stark.query q where q.skb_id = :skb_id),
       (select count(*) from stark.query_vector v where v.skb_id = :skb_id and v.model = :model);

-- name: plan_node_count(skb_id)$
-- `stark-pg index --dry-run`: the SKB's nodes (documents).
select count(*) from stark.node where skb_id = :skb_id;

-- name: plan_all_nodes(skb_id)
-- ...every node's id, when no vector of the model exists yet (all are to embed).
select node_id from stark.node where skb_id = :skb_id order by node_id;

-- name: plan_chunk_count(skb_id, with_relations, max_neighbors, chunk_chars)$
-- ...the multi-vector chunks the SKB's documents make.
select count(*) from stark.render_chunks(:skb_id, null, :with_relations, :max_neighbors, :chunk_chars);

-- name: plan_sample_nodes(skb_id, sample)
-- ...`sample` nodes spread over the SKB (every n/sample-th by id: types are often loaded in runs), so
-- that the sample's document lengths are the SKB's.
select node_id from (select node_id, row_number() over (order by node_id) as r, count(*) over () as n
                     from stark.node where skb_id = :skb_id) s
where mod(r, greatest(n / :sample, 1)) = 0
limit :sample;

-- name: plan_sample_documents(skb_id, node_ids, with_relations, max_neighbors)
-- ...those nodes' documents.
select stark.render_document(:skb_id, u.node_id, :with_relations, :max_neighbors)
from unnest(cast(:node_ids as bigint[])) as u(node_id);

-- name: plan_sample_chunks(skb_id, node_ids, with_relations, max_neighbors, chunk_chars, n)
-- ...and `n` of their chunks, mixed across their kinds.
select c.body from stark.render_chunks(:skb_id, cast(:node_ids as bigint[]), :with_relations, :max_neighbors,
                                       :chunk_chars) c
order by md5(c.node_id::text || ':' || c.chunk_no)
limit :n;
