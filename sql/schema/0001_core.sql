-- Core tables of stark-pg: semi-structured knowledge bases (SKBs) side by side, namespaced by skb_id.
-- Every table leads with skb_id (then node_id) so it can be distributed by SKB/node (e.g. Citus).
-- There are no foreign keys on the bulk tables: the loaders validate every reference while streaming
-- (naming the file and line of a bad one), and `stark-pg drop` deletes an SKB's rows table by table.

create extension if not exists vector;
create schema if not exists stark;

create table stark.skb (
    skb_id     serial primary key,
    name       text not null unique,
    source     text,                                -- where it was loaded from (path, dataset name, generator)
    format     text,                                -- loader that read it: bundle, stark-processed, synthetic, ...
    version    text,
    loaded_at  timestamptz not null default now(),
    meta       jsonb not null default '{}'::jsonb    -- load summary and loader settings
);
comment on table stark.skb is 'One row per loaded semi-structured knowledge base; every other table is keyed by its skb_id.';

create table stark.node (
    skb_id   int    not null,
    node_id  bigint not null,                       -- the source's own id (STaRK node index)
    type     text   not null,
    name     text,
    attrs    jsonb,                                 -- non-text attributes kept from the source
    primary key (skb_id, node_id)
);
create index node_type_idx on stark.node (skb_id, type);
create index node_lower_name_idx on stark.node (skb_id, lower(name));
comment on table stark.node is 'Nodes (entities) of each SKB: id, type and display name.';

create table stark.node_field (
    skb_id   int    not null,
    node_id  bigint not null,
    field    text   not null,                       -- e.g. description, definition, abstract, review
    body     text   not null,
    tsv      tsvector generated always as (to_tsvector('english'::regconfig, body)) stored,
    primary key (skb_id, node_id, field)
);
comment on table stark.node_field is 'One row per text field of a node, with its English tsvector.';

-- Partitioned by SKB: a load fills a new partition `stark.edge__skb<id>` without indexes, builds its
-- two indexes in bulk (sorted: many times faster than maintaining them row by row) and attaches it;
-- dropping an SKB drops its partition. Queries naming an skb_id read only that SKB's partition.
create table stark.edge (
    skb_id    int    not null,
    src       bigint not null,
    relation  text   not null,
    dst       bigint not null
) partition by list (skb_id);
create index edge_out_idx on stark.edge (skb_id, src, relation, dst);
create index edge_in_idx on stark.edge (skb_id, dst, relation, src);
comment on table stark.edge is 'Typed directed edges, one partition per SKB; indexed from both ends (covering).';

create table stark.query (
    skb_id      int    not null,
    query_id    bigint not null,
    split       text   not null,                    -- train, val, test, human, ... (as the source says)
    body        text   not null,
    answer_ids  bigint[] not null,
    primary key (skb_id, query_id)
);
create index query_split_idx on stark.query (skb_id, split);
comment on table stark.query is 'Natural-language queries with their answer node ids, by split.';
