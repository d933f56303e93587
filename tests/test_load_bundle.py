"""Loading the real STaRK-Prime IBD slice (bundle format) through the CLI, and what bad input does."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import IBD, STARK_QA, count_rows
from loaders.bundle import BundleSource
from stark_pg.skb.store import SkbExists, load_skb

pytestmark = pytest.mark.skipif(not IBD.is_dir(), reason="../shared/data/stark-prime-ibd is not here")


def _info(cli, name="stark-prime-ibd") -> dict:
    return json.loads(cli("info", name, "--json").stdout)


def test_real_slice_loads_with_its_published_counts_and_reloads_the_same(cli):
    summary = json.loads(cli("load", IBD, "--json").stdout)
    assert (summary["nodes"], summary["edges"], summary["queries"]) == (3426, 12752, 606)
    info = _info(cli)
    assert (info["nodes"], info["edges"], info["queries"]) == (3426, 12752, 606)
    assert info["queries_by_split"] == {"train": 435, "val": 171}
    assert info["node_types"]["gene/protein"] == 103 and info["node_types"]["biological_process"] == 1642
    assert set(info["relation_types"]) == {"interacts with", "transporter", "target", "associated with", "enzyme",
                                           "carrier"}
    again = json.loads(cli("load", IBD, "--json").stdout)
    assert again["status"] == "replaced"
    assert _info(cli) | {"loaded_at": None} == info | {"loaded_at": None}


def test_a_corrupted_line_fails_naming_file_and_line_and_keeps_the_earlier_skb(cli, db_url, tmp_path):
    cli("load", IBD)
    broken = tmp_path / "stark-prime-ibd"
    shutil.copytree(IBD, broken)
    lines = (broken / "nodes.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[99] = lines[99][: len(lines[99]) // 2] + "\n"     # line 100 cut in half
    (broken / "nodes.jsonl").write_text("".join(lines), encoding="utf-8")
    failed = cli("load", broken, expect=1)
    assert "nodes.jsonl line 100" in failed.stderr and "malformed JSON" in failed.stderr
    assert "Traceback" not in failed.stderr
    info = _info(cli)
    assert (info["nodes"], info["edges"], info["queries"]) == (3426, 12752, 606)
    assert count_rows(db_url, "skb") == 1


def test_readme_join_finds_the_drugs_that_target_pparg(conn):
    load_skb(conn, BundleSource(IBD))
    drugs = conn.execute("""
        select d.name
        from stark.node g
        join stark.edge e on e.skb_id = g.skb_id and e.dst = g.node_id and e.relation = 'target'
        join stark.node d on d.skb_id = e.skb_id and d.node_id = e.src and d.type = 'drug'
        where g.skb_id = stark.skb_id('stark-prime-ibd') and g.name = 'PPARG'
        order by d.name""").fetchall()
    assert len(drugs) == 74, "PrimeKG lists 74 drugs targeting PPARG inside the slice"
    # the same through the graph function, from the gene's side (PrimeKG stores both directions)
    pparg = conn.execute("select node_id from stark.node where name = 'PPARG'").fetchone()[0]
    via_function = conn.execute("select name from stark.neighbors('stark-prime-ibd', %s, 'target') "
                                "where type = 'drug' order by name", (pparg,)).fetchall()
    assert via_function == drugs


def test_stark_qa_files_attach_to_the_slice_with_exactly_its_queries(cli):
    cli("load", IBD)
    refused = cli("load", STARK_QA / "primekg", "--skb", "stark-prime-ibd", expect=1)
    assert "stark_qa.csv line" in refused.stderr and "are not nodes" in refused.stderr
    summary = json.loads(cli("load", STARK_QA / "primekg", "--skb", "stark-prime-ibd", "--drop-dangling",
                             "--json").stdout)
    # the slice's queries.csv holds every train/val STaRK-Prime query whose answers all lie inside it
    assert summary["queries_by_split"] == {"train": 435, "val": 171}
    assert summary["dropped_queries"] == 8403 - 606
    assert _info(cli)["queries"] == 606


def test_if_exists_skip_and_fail(conn):
    load_skb(conn, BundleSource(IBD))
    assert load_skb(conn, BundleSource(IBD), if_exists="skip").status == "skipped"
    with pytest.raises(SkbExists):
        load_skb(conn, BundleSource(IBD), if_exists="fail")


def test_drop_removes_every_row(cli, db_url):
    cli("load", IBD)
    cli("drop", "stark-prime-ibd", "--yes")
    for table in ("skb", "node", "node_field", "edge", "query"):
        assert count_rows(db_url, table) == 0
    import psycopg

    with psycopg.connect(db_url) as c:   # the SKB's edge partition is dropped, not just emptied
        assert c.execute("select count(*) from pg_class where relname like 'edge\\_\\_skb%'").fetchone()[0] == 0
    assert "no SKB named" in cli("drop", "stark-prime-ibd", "--yes", expect=1).stderr


def test_db_status_reports_pgvector_and_the_head_revision(cli):
    status = json.loads(cli("db", "status", "--json").stdout)
    assert status["pgvector"] and status["schema_revision"] == status["head_revision"]
