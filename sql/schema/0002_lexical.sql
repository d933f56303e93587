-- Lexical index: BM25 postings and statistics, derived from PostgreSQL text search ('english').
-- A "scope" is what a document is for BM25: '*' for the whole rendered node document, 'name' for
-- the node's name, or the name of one text field of stark.node_field. Term frequencies and document
-- lengths are stored; idf and the average length are computed at query time from the postings and
-- stark.lex_stats, so adding or replacing nodes (and re-running `stark-pg index`) keeps scores exact.

create table stark.lex_doc (
    skb_id    int    not null,
    scope     text   not null,
    node_id   bigint not null,
    doc_hash  text   not null,          -- md5 of the indexed text: re-indexing skips unchanged documents
    len       int    not null,          -- tokens after stemming and stopword removal
    primary key (skb_id, scope, node_id)
);
comment on table stark.lex_doc is 'One row per (scope, node) in the lexical index, with its token count.';

create table stark.lex_posting (
    skb_id   int    not null,
    scope    text   not null,
    term     text   not null,           -- an English lexeme (stemmed), as to_tsvector('english', ...) makes it
    node_id  bigint not null,
    tf       int    not null,           -- occurrences of the term in the document
    len      int    not null,           -- the document's length (copied here so scoring needs no join)
    -- tf and len ride in the index so that scoring a term is an index-only scan of its postings
    primary key (skb_id, scope, term, node_id) include (tf, len)
);
comment on table stark.lex_posting is 'Postings: which documents of a scope hold a term, how often, and their length.';

create table stark.lex_term (
    skb_id   int    not null,
    scope    text   not null,
    term     text   not null,
    df       int    not null,           -- documents of the scope holding the term
    primary key (skb_id, scope, term)
);
comment on table stark.lex_term is 'Per term of a scope: its document frequency (for idf), kept up to date by stark.lex_refresh.';

create table stark.lex_stats (
    skb_id     int    not null,
    scope      text   not null,
    n_docs     bigint not null,
    total_len  bigint not null,
    primary key (skb_id, scope)
);
comment on table stark.lex_stats is 'Per scope: number of documents and total length (for the average document length).';
