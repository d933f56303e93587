-- Whether an SKB stores every edge both ways: for each edge (src, relation, dst), the edge (dst,
-- relation, src) too. PrimeKG does (STaRK-Prime's relations are symmetric), and so does the synthetic
-- generator. Where it holds, "an edge either way between a and b" is "an edge from a to b", so
-- 4StepFocus's substitution (sql/functions/focus.sql) and KAR's stark.kar_neighbours, whose defaults ignore edge direction, read
-- each member's outgoing edges alone instead of both directions: half the edges of every gather and
-- of every probe that finds no support. Built beside the typed-link summary by `stark-pg index`
-- (stark.edge_type_link_build), once per loaded version, since a version's edges never change; a
-- replacing load does not carry it over (stark.carry_over_skb).

create table stark.edge_symmetry (
    skb_id  int    primary key,
    edges   bigint not null,       -- the SKB's edges
    one_way bigint not null        -- those whose reverse (same relation, ends swapped) is not stored
);
comment on table stark.edge_symmetry is
    'Per SKB: how many of its edges lack their reverse (0: every edge is stored both ways; built by stark-pg index).';
