-- Statements over the per-model vector tables (stark.emb_doc_<model_id>, stark.emb_chunk_<model_id>).
-- Table and index names differ per model and SKB, so these are templates, not aiosql queries:
-- stark_pg/index/dense.py fills the {placeholders} with psycopg.sql identifiers and literals
-- ({doc}, {chunk}, {table}, {index}: identifiers; {skb}, {dim}, {m}, {ef_construction}: literals) and
-- binds the %(name)s parameters as usual. A section runs from its `-- name:` line to the next.

-- name: create_tables
-- One vector per node (the whole rendered document), and several per node (chunks). doc_hash is the
-- md5 of the embedded text: a re-run embeds only what is missing or whose text changed.
create table if not exists {doc} (
    skb_id    int    not null,
    node_id   bigint not null,
    doc_hash  text   not null,
    vec       vector({dim}) not null,
    primary key (skb_id, node_id)
);
create table if not exists {chunk} (
    skb_id    int    not null,
    node_id   bigint not null,
    chunk_no  int    not null,          -- as stark.render_chunks numbers them
    kind      text   not null,          -- 'name', 'field:<field>', 'relation:<relation>'
    doc_hash  text   not null,          -- md5 of the chunk's text
    vec       vector({dim}) not null,
    primary key (skb_id, node_id, chunk_no)
);

-- name: create_hnsw_index
-- One partial index per (table, SKB); named `..__skb<id>` so stark.delete_skb_rows drops it
-- (`<table>_hnsw__skb<id>` for HNSW, `<table>_diskann__skb<id>` for DiskANN: stark.vector_index).
create index if not exists {index} on {table} using hnsw (vec vector_cosine_ops)
    with (m = {m}, ef_construction = {ef_construction}) where skb_id = {skb};

-- name: create_hnsw_halfvec_index
-- storage=halfvec: the index holds half-precision copies (half the size); searches order by the same
-- expression (stark.vector_distance) and score with the table's single-precision vectors.
create index if not exists {index} on {table} using hnsw ((vec::halfvec({dim})) halfvec_cosine_ops)
    with (m = {m}, ef_construction = {ef_construction}) where skb_id = {skb};

-- name: create_diskann_index
-- index=diskann (pgvectorscale), SBQ-compressed memory_optimized layout; stark-pg builds with
-- pgvectorscale's defaults (num_neighbors 50, search_list_size 100: stark_pg.index.dense.DISKANN_BUILD),
-- benchmarks/vector_benchmark.py with others. Searches set diskann.query_search_list_size as HNSW's
-- hnsw.ef_search.
create index if not exists {index} on {table} using diskann (vec vector_cosine_ops)
    with (num_neighbors = {num_neighbors}, search_list_size = {search_list_size}) where skb_id = {skb};

-- name: delete_gone_documents
delete from {doc} d
where d.skb_id = %(skb_id)s
  and not exists (select 1 from stark.node n where n.skb_id = d.skb_id and n.node_id = d.node_id);

-- name: stale_documents
-- Nodes whose rendered document has no vector yet, or a different text than the one embedded.
select n.node_id
from stark.node n
left join {doc} d on d.skb_id = n.skb_id and d.node_id = n.node_id
where n.skb_id = %(skb_id)s
  and d.doc_hash is distinct from md5(stark.render_document(n.skb_id, n.node_id, %(with_relations)s,
                                                            %(max_neighbors)s))
order by n.node_id;

-- name: render_documents
select u.node_id, r.body, md5(r.body)
from unnest(%(node_ids)s::bigint[]) as u(node_id)
cross join lateral stark.render_document(%(skb_id)s, u.node_id, %(with_relations)s, %(max_neighbors)s) as r(body)
where r.body is not null;

-- name: upsert_documents
insert into {doc} (skb_id, node_id, doc_hash, vec)
select %(skb_id)s, u.node_id, u.doc_hash, u.vec
from unnest(%(node_ids)s::bigint[], %(hashes)s::text[], %(vecs)s::vector[]) as u(node_id, doc_hash, vec)
on conflict (skb_id, node_id) do update set doc_hash = excluded.doc_hash, vec = excluded.vec;

-- name: stale_chunk_nodes
-- Nodes with a chunk that is new, changed or gone (a node that no longer exists shows up through
-- its stored chunks, which the batch then deletes).
with now_ as (
    select c.node_id, c.chunk_no, c.kind, md5(c.body) as doc_hash
    from stark.render_chunks(%(skb_id)s, null, %(with_relations)s, %(max_neighbors)s, %(chunk_chars)s) c),
stored as (
    select s.node_id, s.chunk_no, s.kind, s.doc_hash from {chunk} s where s.skb_id = %(skb_id)s)
select distinct coalesce(n.node_id, s.node_id) as node_id
from now_ n
full join stored s on s.node_id = n.node_id and s.chunk_no = n.chunk_no and s.kind = n.kind
                  and s.doc_hash = n.doc_hash
where n.node_id is null or s.node_id is null
order by 1;

-- name: count_chunks_to_embed
-- The chunks an SKB's nodes have now, and how many of them have no vector of this text yet.
select count(*) as chunks,
       count(*) filter (where not exists (
           select 1 from {chunk} s where s.skb_id = %(skb_id)s and s.node_id = c.node_id and s.chunk_no = c.chunk_no
                                    and s.kind = c.kind and s.doc_hash = md5(c.body))) as to_embed
from stark.render_chunks(%(skb_id)s, null, %(with_relations)s, %(max_neighbors)s, %(chunk_chars)s) c;

-- name: render_chunks
select c.node_id, c.chunk_no, c.kind, c.body, md5(c.body)
from stark.render_chunks(%(skb_id)s, %(node_ids)s::bigint[], %(with_relations)s, %(max_neighbors)s,
                         %(chunk_chars)s) c;

-- name: stored_chunks
select s.node_id, s.chunk_no, s.kind, s.doc_hash
from {chunk} s where s.skb_id = %(skb_id)s and s.node_id = any (%(node_ids)s::bigint[]);

-- name: upsert_chunks
insert into {chunk} (skb_id, node_id, chunk_no, kind, doc_hash, vec)
select %(skb_id)s, u.node_id, u.chunk_no, u.kind, u.doc_hash, u.vec
from unnest(%(node_ids)s::bigint[], %(chunk_nos)s::int[], %(kinds)s::text[], %(hashes)s::text[],
            %(vecs)s::vector[]) as u(node_id, chunk_no, kind, doc_hash, vec)
on conflict (skb_id, node_id, chunk_no) do update
    set kind = excluded.kind, doc_hash = excluded.doc_hash, vec = excluded.vec;

-- name: delete_chunks
delete from {chunk} s
using unnest(%(node_ids)s::bigint[], %(chunk_nos)s::int[]) as u(node_id, chunk_no)
where s.skb_id = %(skb_id)s and s.node_id = u.node_id and s.chunk_no = u.chunk_no;

-- name: count_vectors
select (select count(*) from {doc} where skb_id = %(skb_id)s),
       (select count(*) from {chunk} where skb_id = %(skb_id)s);

-- name: count_document_nodes
select count(*) from {doc} where skb_id = %(skb_id)s;

-- name: count_chunk_nodes
select count(distinct node_id) from {chunk} where skb_id = %(skb_id)s;

-- name: chunk_vectors_of_nodes
-- Every chunk vector of some nodes, with its kind (mFAR's query-encoder fine-tuning scores them in torch).
select node_id, kind, vec from {chunk} where skb_id = %(skb_id)s and node_id = any(%(node_ids)s::bigint[]);

-- name: doc_vectors_of_nodes
select node_id, vec from {doc} where skb_id = %(skb_id)s and node_id = any(%(node_ids)s::bigint[]);

-- name: delete_skb_documents
-- Every document vector of one SKB under this model: an import replaces them whole, and `stark-pg
-- train dense` retraining a name does too (the texts are unchanged, so their md5 alone would keep the
-- old encoder's vectors).
delete from {doc} where skb_id = %(skb_id)s;

-- name: delete_skb_chunks
delete from {chunk} where skb_id = %(skb_id)s;
