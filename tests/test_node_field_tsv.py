"""stark.node_field.tsv: virtual on PostgreSQL 18 (a load no longer stems every field), same values."""

from __future__ import annotations


def test_tsv_is_virtual_on_postgresql_18_and_equals_the_expression(conn):
    major = int(conn.execute("show server_version_num").fetchone()[0]) // 10000
    generated = conn.execute("""select attgenerated from pg_attribute
                                where attrelid = 'stark.node_field'::regclass and attname = 'tsv'""").fetchone()[0]
    assert generated == ("v" if major >= 18 else "s")
    conn.execute("insert into stark.skb (skb_id, name, source, format) values (901, 'tsv-check', 'test', 'test')")
    conn.execute("insert into stark.node (skb_id, node_id, type, name) values (901, 1, 'gene', 'A')")
    conn.execute("insert into stark.node_field (skb_id, node_id, field, body) values "
                 "(901, 1, 'description', 'Interleukin receptors binding the cytokines')")
    tsv, expected, matches = conn.execute(
        """select tsv::text, to_tsvector('english', body)::text,
                  tsv @@ websearch_to_tsquery('english', 'interleukin receptor')
           from stark.node_field where skb_id = 901""").fetchone()
    assert tsv == expected and "'receptor'" in tsv and matches
