-- Rendering a node as one text document: what BM25 over whole documents and VSS embed.
-- Lines "name: ...", "type: ...", one line per text field, and optionally one line per relation
-- listing the neighbours' names ("target: SMAD3, IL10RB"), as STaRK's VSS embeds textual and
-- relational information. Per-field texts stay in stark.node_field for field-level scoring.

create or replace function stark.render_document(
    skb int, node bigint, with_relations boolean default false, max_neighbors int default 25)
returns text
language sql stable parallel safe as $$
    select concat_ws(E'\n',
        'name: ' || n.name,
        'type: ' || n.type,
        (select string_agg(f.field || ': ' || f.body, E'\n' order by f.field)
           from stark.node_field f where f.skb_id = skb and f.node_id = node),
        case when with_relations then
            (select string_agg(r.relation || ': ' || r.names, E'\n' order by r.relation)
               from (select e.relation,
                            string_agg(coalesce(m.name, e.dst::text), ', ' order by m.name) as names
                       from (select e.*, row_number() over (partition by e.relation order by e.dst) as i
                               from stark.edge e where e.skb_id = skb and e.src = node) e
                       left join stark.node m on m.skb_id = skb and m.node_id = e.dst
                      where e.i <= max_neighbors
                      group by e.relation) r)
        end)
    from stark.node n
    where n.skb_id = skb and n.node_id = node
$$;
comment on function stark.render_document(int, bigint, boolean, int) is
    'A node as one text (by skb_id): name, type, fields, and optionally up to max_neighbors neighbour names per relation.';

create or replace function stark.document(skb_name text, node bigint, with_relations boolean default false)
returns text
language sql stable as $$
    select stark.render_document(stark.require_skb(skb_name), node, with_relations)
$$;
comment on function stark.document(text, bigint, boolean) is
    'A node of the named SKB rendered as one text document (see stark.render_document).';
