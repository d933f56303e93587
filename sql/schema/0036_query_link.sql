-- The entities each stored question names: its best name matches (BM25 over node names, as learned
-- fusion's `linked` feature finds them for a new question), with their score as a share of the best.
-- Learned fusion's ent_answer and ent_best join a question's own matches to these, to find the
-- training questions that name the same entity; computing them at search time would mean one BM25
-- search per training question. Filled by stark.link_queries (`stark-pg train fusion` fills the
-- training split); a row whose body_md5 is not its question's text any more is ignored.

create table stark.query_link (
    skb_id    int    not null,
    query_id  bigint not null,
    body_md5  text   not null,
    rank      int    not null,
    node_id   bigint not null,
    weight    double precision not null,
    primary key (skb_id, query_id, rank)
);
create index query_link_node on stark.query_link (skb_id, node_id);

comment on table stark.query_link is
    'The best name matches of each stored question (stark.link_queries), for learned fusion''s ent_* features.';
