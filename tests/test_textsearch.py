"""BM25 through pg_textsearch's index: the same ranking as the exact SQL engine, kept up to date by
incremental index builds, chosen by `engine` (auto, textsearch, sql), and gone with its SKB."""

from __future__ import annotations

import psycopg
import pytest

from conftest import IBD, cli_runner
from loaders.bundle import BundleSource
from stark_pg.index.lexical import build_lexical
from stark_pg.options import OptionError
from stark_pg.retrieve import MissingIndex, bm25
from stark_pg.skb.store import load_skb

pytestmark = pytest.mark.skipif(not IBD.is_dir(), reason="../shared/data/stark-prime-ibd is not here")
SKB = "stark-prime-ibd"


@pytest.fixture
def ibd(conn) -> int:
    summary = load_skb(conn, BundleSource(IBD))
    report = build_lexical(conn, SKB)
    assert report["engine"] == "textsearch"          # the embedded server ships pg_textsearch
    return summary.skb_id


def top(conn, skb_id: int, scope: str, query: str, engine: str, k: int = 10) -> list[tuple[int, float]]:
    return conn.execute("select node_id, score from stark.bm25_top(%s, %s, %s, %s, 1.2, 0.75, %s)",
                        (skb_id, scope, query, k, engine)).fetchall()


def val_queries(conn, skb_id: int) -> list[str]:
    return [r[0] for r in conn.execute("select body from stark.query where skb_id = %s and split = 'val' "
                                       "order by query_id", (skb_id,))]


def test_each_scope_has_its_own_index_with_its_own_statistics(conn, ibd):
    tables = dict(conn.execute("""select scope, stark.bm25_table(%s, scope) from stark.lex_stats
                                  where skb_id = %s""", (ibd, ibd)).fetchall())
    assert {"*", "name", "description"} <= set(tables)
    for scope, table in tables.items():
        n_docs = conn.execute("select n_docs from stark.lex_stats where skb_id = %s and scope = %s",
                              (ibd, scope)).fetchone()[0]
        assert conn.execute(f"select count(*) from stark.{table}").fetchone()[0] == n_docs
        index = conn.execute("select indexdef from pg_indexes where schemaname = 'stark' and indexname = "
                             "stark.bm25_index(%s, %s)", (ibd, scope)).fetchone()[0]
        assert "USING bm25" in index and "english" in index
        summary = conn.execute("select bm25_summarize_index(%s)",
                               ("stark." + conn.execute("select stark.bm25_index(%s, %s)", (ibd, scope)).fetchone()[0],)
                               ).fetchone()[0]
        assert f"total_docs: {n_docs}\n" in summary        # not the whole table's: one table per scope


def test_both_engines_rank_val_queries_alike(conn, ibd):
    """Same tokens (the english configuration), same formula, same order (score, then node id): the top
    100 of every val query is the same list with the same scores, although pg_textsearch ranks with
    compressed document lengths (stark.bm25_index_top re-scores its scan's candidates exactly)."""
    queries = [body for body, in conn.execute("select body from stark.query where skb_id = %s and split = 'val'",
                                              (ibd,))]
    assert len(queries) == 171
    for body in queries:
        assert top(conn, ibd, "*", body, "textsearch", k=100) == top(conn, ibd, "*", body, "sql", k=100), body
    for body in queries[:20]:
        assert top(conn, ibd, "name", body, "textsearch", k=5) == top(conn, ibd, "name", body, "sql", k=5), body


def test_the_index_never_scores_a_row_below_its_exact_score(conn, ibd):
    """stark.bm25_index_top stops fetching once the k-th exact score is above the last fetched index
    score: sound only if a row's index score bounds its exact score from above (pg_textsearch rounds
    document lengths down when it compresses them), up to float4 rounding. Checked on the slice, whose
    long documents are the ones compression changes (index scores up to 8% above the exact ones)."""
    above = 0
    for body in val_queries(conn, ibd)[:60]:
        scan = dict(conn.execute("select node_id, -index_score / 2.2 from stark.bm25_index_scan(%s, '*', %s, 100) "
                                 "where index_score < 0", (ibd, body)).fetchall())
        exact = dict(conn.execute("select node_id, score from stark.bm25_rows(%s, '*', %s, %s)",
                                  (ibd, body, list(scan))).fetchall())
        assert set(exact) == set(scan), body
        assert all(scan[n] >= exact[n] * (1 - 1e-6) for n in scan), body
        above += sum(scan[n] > exact[n] * (1 + 1e-3) for n in scan)
    assert above > 100                  # compression really is at work on these documents


def test_exact_ties_rank_by_node_id_in_both_engines(conn, tmp_path):
    """Many nodes with the very same text score the same to the bit; both engines must then cut the top
    k at the same nodes (the lowest node ids) and list them in the same order. The index scan alone
    breaks ties its own way (by where rows sit in the index), which gave a different top 10 for a fifth
    of the queries of a 100,000-node synthetic SKB. Node ids are written in shuffled order, and some
    tied nodes are re-inserted by an incremental build, so that the index's order is not the ids'."""
    import json
    import random

    from test_bad_input import write_bundle

    rng = random.Random(7)
    tied = rng.sample(range(1000, 5000), 300)
    nodes = [{"id": n, "type": "drug", "name": "Tiedamab", "fields": {"description": "kinase inhibitor against colitis"}}
             for n in tied]
    nodes += [{"id": 10 + i, "type": "drug", "name": f"Strongamab {i}",
               "fields": {"description": "kinase inhibitor against colitis colitis kinase" + " and more" * (i % 3)}}
              for i in range(7)]
    nodes += [{"id": 9000 + i, "type": "disease", "name": f"Filler {i}", "fields": {"description": "unrelated text"}}
              for i in range(400)]
    rng.shuffle(nodes)
    path = write_bundle(tmp_path / "ties", raw_nodes="".join(json.dumps(n) + "\n" for n in nodes).encode(),
                        edges=f"src\trelation\tdst\n10\ttarget\t{tied[0]}\n", queries=None)
    skb_id = load_skb(conn, BundleSource(path)).skb_id
    assert build_lexical(conn, "ties")["engine"] == "textsearch"

    def agree(query: str) -> None:
        for k in (1, 5, 10, 25, 100, 400):
            indexed, exact = top(conn, skb_id, "*", query, "textsearch", k), top(conn, skb_id, "*", query, "sql", k)
            assert indexed == exact, (query, k)
            assert exact == sorted(exact, key=lambda r: (-r[1], r[0]))
        ranked = top(conn, skb_id, "*", query, "sql", 60)
        tied_scores = {s for n, s in ranked if n in tied}
        assert len(tied_scores) == 1                     # identical texts: identical scores, to the bit
        first = [n for n, _ in ranked if n in tied]
        assert len(first) >= 50 and first == sorted(tied)[:len(first)]   # the lowest ids of the tie, in order

    for query in ("kinase colitis", "colitis", "inhibitor against colitis", "Tiedamab kinase"):
        agree(query)
    with conn.transaction():                             # re-inserted rows move in the index
        for node_id in sorted(tied)[:5]:
            conn.execute("update stark.node_field set body = body || ' ' where skb_id = %s and node_id = %s",
                         (skb_id, node_id))
    assert build_lexical(conn, "ties")["reindexed"]["*"] == 5
    agree("kinase colitis")


def test_incremental_builds_keep_the_index_up_to_date(conn, ibd):
    with conn.transaction():
        conn.execute("insert into stark.node values (%s, 999001, 'drug', 'Testamab', null)", (ibd,))
        conn.execute("insert into stark.node_field (skb_id, node_id, field, body) values (%s, 999001, "
                     "'description', 'Zyzzogeton kinase blocker against zyzzogeton signalling.')", (ibd,))
        conn.execute("update stark.node_field set body = body || ' Quixotrel receptor.' "
                     "where skb_id = %s and node_id = 144 and field = 'description'", (ibd,))
        gone = conn.execute("select node_id from stark.node where skb_id = %s and type = 'drug' "
                            "order by node_id limit 1", (ibd,)).fetchone()[0]
        name = conn.execute("select name from stark.node where skb_id = %s and node_id = %s", (ibd, gone)).fetchone()[0]
        conn.execute("delete from stark.node_field where skb_id = %s and node_id = %s", (ibd, gone))
        conn.execute("delete from stark.node where skb_id = %s and node_id = %s", (ibd, gone))
    report = build_lexical(conn, SKB)
    assert report["reindexed"]["*"] == 2
    assert [n for n, _ in top(conn, ibd, "*", "zyzzogeton", "textsearch")] == [999001]
    assert [n for n, _ in top(conn, ibd, "description", "quixotrel", "textsearch")] == [144]
    assert gone not in [n for n, _ in top(conn, ibd, "name", name, "textsearch", k=50)]
    assert gone not in [n for n, _ in top(conn, ibd, "name", name, "sql", k=50)]
    table = conn.execute("select stark.bm25_table(%s, '*')", (ibd,)).fetchone()[0]
    assert conn.execute(f"select count(*) from stark.{table}").fetchone()[0] == 3426 + 1 - 1


def test_engine_choice_and_its_errors(conn, ibd):
    query = "crohn disease drug"
    engine = lambda wanted, k1=1.2, b=0.75: conn.execute(      # noqa: E731
        "select stark.bm25_engine(%s, '*', %s, %s, %s)", (ibd, wanted, k1, b)).fetchone()[0]
    assert engine("auto") == "textsearch" and engine("sql") == "sql"
    assert engine("auto", k1=2.0) == "sql"                 # k1 and b are settings of the index
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="built with"):
        engine("textsearch", b=0.5)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown BM25 engine"):
        engine("lucene")

    ranking = bm25.search(conn, SKB, query, k=5)
    assert ranking.trace["engine"] == "textsearch"
    exact = bm25.search(conn, SKB, query, k=5, options=bm25.Options(engine="sql"))
    assert exact.trace["engine"] == "sql"
    assert [h.node_id for h in ranking.hits] == [h.node_id for h in exact.hits]
    assert [h.node_id for h in ranking.hits] == [r[0] for r in conn.execute(
        "select node_id from stark.bm25(%s, %s, 5)", (SKB, query))]
    with pytest.raises(MissingIndex, match="engine=textsearch.*built with"):
        bm25.search(conn, SKB, query, options=bm25.Options(engine="textsearch", k1=2.0))

    build_lexical(conn, SKB, textsearch=False)             # --no-textsearch: the tables go, auto falls back
    assert conn.execute("select count(*) from pg_class where relname like 'lexbm25%%__skb' || %s",
                        (ibd,)).fetchone()[0] == 0
    assert bm25.search(conn, SKB, query, k=5).trace["engine"] == "sql"
    with pytest.raises(MissingIndex, match="has no pg_textsearch index"):
        bm25.search(conn, SKB, query, options=bm25.Options(engine="textsearch"))


def test_engine_option_is_checked(conn, ibd):
    from stark_pg.options import parse_options

    assert parse_options(bm25.Options, ["engine=sql"]).engine == "sql"
    with pytest.raises(OptionError, match="engine=lucene.*one of auto, textsearch, sql"):
        parse_options(bm25.Options, ["engine=lucene"])


def test_dropping_the_skb_drops_its_indexes(db_url):
    run = cli_runner(db_url)
    run("load", str(IBD))
    done = run("index", SKB, "--no-dense")
    assert "pg_textsearch" in done.stdout
    with psycopg.connect(db_url) as conn:
        assert conn.execute("select count(*) from pg_class where relname like 'lexbm25%%' and relkind = 'r'").fetchone()[0] == 4
    run("drop", SKB, "--yes")
    with psycopg.connect(db_url) as conn:
        assert conn.execute("select count(*) from pg_class where relname like 'lexbm25%%'").fetchone()[0] == 0


def test_the_index_scans_scores_are_those_of_the_operator_and_any_query_text_is_safe(conn, ibd):
    """stark.bm25_index_scan inlines the query text as a literal so that the scan's own scores come back
    (bm25_get_current_score()): they must be the operator's per-row scores, and quotes, dollars or
    backslashes in the text must stay text (a mis-quoted literal would fail or change the query).
    stark.bm25_top, which re-scores the scan's rows exactly, ranks such texts as the SQL engine does."""
    index, table = conn.execute("select 'stark.' || stark.bm25_index(%s, '*'), stark.bm25_table(%s, '*')",
                                (ibd, ibd)).fetchone()
    for query in [*val_queries(conn, ibd)[:5], "Crohn's disease'); drop table stark.node; --",
                  "$$ colitis $1 \\' mesalazine"]:
        ranked = conn.execute("select node_id, -index_score / 2.2 from stark.bm25_index_scan(%s, '*', %s, 1000) "
                              "where index_score < 0", (ibd, query)).fetchall()
        assert ranked, query
        assert len(ranked) <= 1000 and [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
        per_row = dict(conn.execute(f"select node_id, -(body <@> to_bm25query(%s, %s)) / 2.2 from stark.{table} "
                                    "where node_id = any(%s)", (query, index, [n for n, _ in ranked])).fetchall())
        assert all(abs(score - per_row[n]) <= 1e-5 * max(1.0, abs(score)) for n, score in ranked), query
        assert top(conn, ibd, "*", query, "textsearch", k=50) == top(conn, ibd, "*", query, "sql", k=50), query
    assert conn.execute("select count(*) from stark.node where skb_id = %s", (ibd,)).fetchone()[0] == 3426
    assert top(conn, ibd, "*", "", "textsearch") == [] and top(conn, ibd, "*", None, "textsearch") == []


def test_a_table_small_enough_for_a_sequential_scan_still_ranks_through_the_index(conn, tmp_path):
    """On a three-node SKB the planner prefers a sequential scan and a sort, whose rows carry no scan
    score (bm25_get_current_score() gave 0 for every one, so bm25_top and mFAR's shortlists came back
    empty, or, after other BM25 statements in the session, held a stale score): stark.bm25_index_scan
    turns sequential scans off for its statement. mFAR's shortlist comes first, on a fresh session."""
    from test_bad_input import write_bundle

    skb_id = load_skb(conn, BundleSource(write_bundle(tmp_path / "tiny"))).skb_id
    assert build_lexical(conn, "tiny")["engine"] == "textsearch"
    for scope in ("*", "description"):              # statistics that show the table's size to the planner
        conn.execute(f"analyze stark.{conn.execute('select stark.bm25_table(%s, %s)', (skb_id, scope)).fetchone()[0]}")
    shortlist = conn.execute("select node_id, field from stark.mfar_field_scores('tiny', 'pain relief', null::vector, "
                             "'all-MiniLM-L6-v2', array['description'], '{}'::text[], 10, null::bigint[], 1.2, 0.75, "
                             "'textsearch')").fetchall()
    assert shortlist == [(1, "description")]
    assert dict(top(conn, skb_id, "description", "pain relief", "textsearch")) == pytest.approx(
        dict(top(conn, skb_id, "description", "pain relief", "sql")), rel=1e-5)
    assert dict(top(conn, skb_id, "description", "pain relief", "sql"))
    assert [n for n, _ in top(conn, skb_id, "*", "pain relief", "textsearch")] == [1]
    assert conn.execute("show enable_seqscan").fetchone()[0] == "on"     # only the function's statement


def test_a_scope_without_an_index_gives_one_error_whichever_function_needs_the_index(conn, ibd):
    """stark.bm25_engine (engine textsearch) and stark.bm25_index_scan both go through
    stark.bm25_index_required: the same message and the same SQLSTATE (22023, invalid_parameter_value;
    the scan gave P0001 before migration 0029), for an unknown scope and for an SKB without indexes."""
    calls = {"engine": "select stark.bm25_engine(%s, %s, 'textsearch')",
             "scan": "select * from stark.bm25_index_scan(%s, %s, 'crohn disease', 10)",
             "top": "select * from stark.bm25_top(%s, %s, 'crohn disease', 10, 1.2, 0.75, 'textsearch')"}
    for skb_id, scope in ((ibd, "no such field"), (ibd + 1000, "*"), (None, "*")):
        messages = set()
        for name, sql in calls.items():
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="has no pg_textsearch index") as caught:
                conn.execute(sql, (skb_id, scope))
            messages.add(caught.value.diag.message_primary)
        assert len(messages) == 1, messages
    assert conn.execute("select stark.bm25_index_required(%s, '*')::text", (ibd,)).fetchone()[0].endswith(
        conn.execute("select stark.bm25_index(%s, '*')", (ibd,)).fetchone()[0])
