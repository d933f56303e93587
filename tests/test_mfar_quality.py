"""mFAR on the real STaRK-Prime slice: trained on train, it must beat BM25, VSS and their fusion on val.

The session's indexed slice (conftest.ibd_indexed_url: BM25, document vectors, val evaluations of
bm25, vss and hybrid) is cloned and given the type and relation BM25 scopes; the model is then
trained over what is indexed there: BM25 on every field and the document vector (the per-field
vectors would take minutes of CPU embedding; the README's figures include them).
"""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from conftest import cloned_database
from test_retrieval_quality import latest_mrr

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ibd_mfar_url(server_url, ibd_indexed_url):
    from stark_pg.db import connect
    from stark_pg.eval import query_sets
    from stark_pg.eval.runner import run_method
    from stark_pg.index.lexical import build_lexical, relation_scopes
    from stark_pg.retrieve import get_method, mfar
    from stark_pg.train.mfar import TrainSettings, train_mfar

    with cloned_database(server_url, conninfo_to_dict(ibd_indexed_url)["dbname"], "stark_ibd_mfar") as url:
        with connect(url) as conn:
            build_lexical(conn, "stark-prime-ibd", extra_scopes=relation_scopes(conn, "stark-prime-ibd"))
            report = train_mfar(conn, "stark-prime-ibd", TrainSettings(variant="all"))
            skb_id = conn.execute("select stark.skb_id('stark-prime-ibd')").fetchone()[0]
            run_method(conn, skb_id, "stark-prime-ibd", "mfar", mfar.Options(),
                       query_sets.from_split(conn, skb_id, "val"), resolve=get_method)
            # early stopping chose the epoch on a held-out part of train (never val): rank it in SQL too
            held = query_sets.hold_out(query_sets.from_split(conn, skb_id, "train"), 0.2, 0)[1]
            on_held = run_method(conn, skb_id, "stark-prime-ibd", "mfar", mfar.Options(), held, resolve=get_method)
        yield url, report, on_held.summary["metrics"]["mrr"]


def test_mfar_beats_bm25_vss_and_their_fusion_on_val(ibd_mfar_url):
    url, report, held_mrr = ibd_mfar_url
    mrr = latest_mrr(url)
    assert "relation:target:lexical" in [str(p) for p in report.model.pairs]
    assert "document:dense" in [str(p) for p in report.model.pairs]
    # the eval run (SQL ranking) agrees with what training measured on the same (held-out) queries
    assert held_mrr == pytest.approx(report.model.metrics["holdout_mrr"], abs=0.005)
    assert mrr["mfar"] > max(mrr["bm25"], mrr["vss"], mrr["hybrid"])
