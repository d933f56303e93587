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
    """Same tokens (the english configuration), same formula: the ranking differs only where
    pg_textsearch's compressed document lengths break near-ties (measured: 0.97 top-10 overlap)."""
    overlaps, reciprocal, deviations = [], {"sql": [], "textsearch": []}, []
    queries = conn.execute("select body, answer_ids from stark.query where skb_id = %s and split = 'val'",
                           (ibd,)).fetchall()
    for body, answer_ids in queries:
        relevant = set(answer_ids)
        ranked = {engine: top(conn, ibd, "*", body, engine, k=100) for engine in ("sql", "textsearch")}
        ten = [{n for n, _ in ranked[e][:10]} for e in ("sql", "textsearch")]
        overlaps.append(len(ten[0] & ten[1]) / max(len(ten[0]), 1))
        for engine, rows in ranked.items():
            ranks = [i for i, (n, _) in enumerate(rows, 1) if n in relevant]
            reciprocal[engine].append(1 / ranks[0] if ranks else 0.0)
        sql_scores, ts_scores = dict(ranked["sql"]), dict(ranked["textsearch"])
        deviations += [abs(ts_scores[n] / sql_scores[n] - 1) for n in set(sql_scores) & set(ts_scores)]
    assert len(overlaps) == 171
    # one scale, (k1 + 1) and the sign undone; measured: median 0.7%, largest 7% (a long document's length)
    deviations.sort()
    assert deviations[len(deviations) // 2] < 0.02 and deviations[-1] < 0.1
    assert sum(overlaps) / len(overlaps) >= 0.95
    mrr = {engine: sum(v) / len(v) for engine, v in reciprocal.items()}
    assert abs(mrr["sql"] - mrr["textsearch"]) <= 0.01, mrr


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
    """stark.bm25_top inlines the query text as a literal so that the scan's own scores come back
    (bm25_get_current_score()): they must be the operator's per-row scores, and quotes, dollars or
    backslashes in the text must stay text (a mis-quoted literal would fail or change the query)."""
    index, table = conn.execute("select 'stark.' || stark.bm25_index(%s, '*'), stark.bm25_table(%s, '*')",
                                (ibd, ibd)).fetchone()
    for query in [*val_queries(conn, ibd)[:5], "Crohn's disease'); drop table stark.node; --",
                  "$$ colitis $1 \\' mesalazine"]:
        ranked = top(conn, ibd, "*", query, "textsearch", k=1000)
        assert ranked, query
        assert len(ranked) <= 1000 and [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
        per_row = dict(conn.execute(f"select node_id, -(body <@> to_bm25query(%s, %s)) / 2.2 from stark.{table} "
                                    "where node_id = any(%s)", (query, index, [n for n, _ in ranked])).fetchall())
        assert all(abs(score - per_row[n]) <= 1e-5 * max(1.0, abs(score)) for n, score in ranked), query
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
