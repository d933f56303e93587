"""4StepFocus's answer type: the vote of the nearest training queries (stark.answer_type_votes),
the mixture with the LLM's type, and the ranking that adds the type's probability to the cosine
(stark.focus_rank), each checked against numpy on the real slice."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from psycopg.conninfo import conninfo_to_dict

from conftest import cloned_database
from stark_pg.db import connect
from stark_pg.embed import canonical_name, encode
from stark_pg.resources import queries as sql
from stark_pg.retrieve.focus import answer_type

SKB = "stark-prime-ibd"
MODEL = canonical_name(None)


@pytest.fixture(scope="module")
def ibd_copy(server_url, ibd_indexed_url):
    """The indexed slice, cloned: these tests write query vectors and change a query's text."""
    with cloned_database(server_url, conninfo_to_dict(ibd_indexed_url)["dbname"], "stark_ibd_types") as url:
        yield url


@pytest.fixture(scope="module")
def slice_data(ibd_copy):
    with connect(ibd_copy) as conn:
        skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
        node_type = dict(conn.execute("select node_id, type from stark.node where skb_id = %s", (skb_id,)).fetchall())
        queries = conn.execute("select query_id, split, body, answer_ids from stark.query where skb_id = %s "
                               "order by query_id", (skb_id,)).fetchall()
    return node_type, queries


def numpy_votes(question_vec, question, train, train_vecs, node_type, k):
    order = sorted(range(len(train)), key=lambda i: (-float(train_vecs[i] @ question_vec), train[i][0]))
    near = [i for i in order if train[i][2] != question][:k]
    shares: Counter = Counter()
    for i in near:
        types = Counter(node_type[a] for a in train[i][3] if a in node_type)
        for t, n in types.items():
            shares[t] += n / sum(types.values())
    return {t: s / len(near) for t, s in shares.items()}


def test_votes_equal_numpy_and_name_the_answer_type_of_most_val_questions(ibd_copy, slice_data):
    node_type, queries = slice_data
    train = [q for q in queries if q[1] == "train"]
    val = [q for q in queries if q[1] == "val"]
    train_vecs = encode([q[2] for q in train], MODEL)
    val_vecs = encode([q[2] for q in val], MODEL)
    right = 0
    with connect(ibd_copy) as conn:
        assert answer_type.embed_split(conn, SKB, "train", MODEL) == len(train)
        assert answer_type.embed_split(conn, SKB, "train", MODEL) == 0          # stored: nothing left to embed
        for q, vec in zip(val, val_vecs):
            got = answer_type.votes(conn, SKB, q[2], vec, k=10, model=MODEL)
            expected = numpy_votes(vec, q[2], train, train_vecs, node_type, 10)
            assert dict(got) == pytest.approx(expected, abs=1e-5)
            assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
            answer_types = Counter(node_type[a] for a in q[3])
            right += got[0][0] == answer_types.most_common(1)[0][0]
    # measured: 158 of 171 (92%); the 1.5B LLM's target type was right for 70%
    assert right / len(val) >= 0.85


def test_a_training_question_does_not_vote_for_itself_and_new_text_is_re_embedded(ibd_copy, slice_data):
    node_type, queries = slice_data
    train = [q for q in queries if q[1] == "train"]
    query_id, _, body, answers = train[0]
    with connect(ibd_copy) as conn:
        vec = encode([body], MODEL)[0]
        answer_type.embed_split(conn, SKB, "train", MODEL)
        nearest = conn.execute(
            "select q.query_id from stark.query q join stark.query_vector v using (skb_id, query_id) "
            "where q.skb_id = stark.skb_id(%s) and q.split = 'train' and q.body <> %s "
            "order by v.vec <=> %s, q.query_id limit 10", (SKB, body, vec)).fetchall()
        assert query_id not in {n for n, in nearest}
        train_vecs = encode([q[2] for q in train], MODEL)
        assert dict(answer_type.votes(conn, SKB, body, vec, k=10, model=MODEL)) == pytest.approx(
            numpy_votes(vec, body, train, train_vecs, node_type, 10), abs=1e-5)
        # a reloaded query with new text gets a new vector instead of the stale one
        conn.execute("update stark.query set body = body || ' (reworded)' where skb_id = stark.skb_id(%s) "
                     "and query_id = %s", (SKB, query_id))
        assert answer_type.embed_split(conn, SKB, "train", MODEL) == 1
        stored = conn.execute("select vec from stark.query_vector where skb_id = stark.skb_id(%s) and query_id = %s",
                              (SKB, query_id)).fetchone()[0].to_numpy()
        assert np.allclose(stored, encode([body + " (reworded)"], MODEL)[0], atol=1e-5)


def test_belief_mixes_the_llm_type_and_the_vote():
    voted = [("drug", 0.7), ("pathway", 0.3)]
    b = answer_type.belief("disease", voted, 0.5)
    assert b.probabilities == pytest.approx({"drug": 0.35, "pathway": 0.15, "disease": 0.5})
    assert b.best == "disease"
    assert answer_type.belief("disease", voted, 0.0).best == "drug"
    assert answer_type.belief(None, voted, 0.5).probabilities == pytest.approx(dict(voted))   # no LLM type: the vote
    assert answer_type.belief("disease", [], 0.5).probabilities == {"disease": 1.0}           # no vote: the LLM
    assert answer_type.belief(None, [], 0.5).best is None
    assert answer_type.belief("drug", voted, 0.5).probabilities == pytest.approx({"drug": 0.85, "pathway": 0.15})
    with pytest.raises(ValueError, match="llm_type_share"):
        answer_type.belief("drug", voted, 1.5)


def test_rank_puts_candidates_first_then_orders_by_cosine_plus_the_type_bonus(ibd_copy, slice_data):
    node_type, queries = slice_data
    val = [q for q in queries if q[1] == "val"][:12]
    with connect(ibd_copy) as conn:
        skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
        table = conn.execute("select doc_table from stark.embedding_model where name = %s", (MODEL,)).fetchone()[0]
        rows = conn.execute(f"select node_id, vec from stark.{table} where skb_id = %s", (skb_id,)).fetchall()
        ids = np.array([r[0] for r in rows])
        matrix = np.stack([r[1].to_numpy() for r in rows]).astype(np.float64)
        types = np.array([node_type[i] for i in ids])
        rng = np.random.default_rng(5)
        for n, q in enumerate(val):
            vec = encode([q[2]], MODEL)[0]
            cos = matrix @ vec.astype(np.float64)
            probs = {"drug": 0.6, "pathway": 0.3, "disease": 0.1} if n % 2 else {"cellular_component": 1.0}
            weight = [0.25, 0.5, 2.0][n % 3]
            candidates = None if n % 4 == 0 else sorted(int(i) for i in rng.choice(ids, size=5, replace=False))
            got = list(sql().focus_rank(conn, skb=SKB, embedding=vec, candidates=candidates,
                                        type_names=sorted(probs), type_probs=[probs[t] for t in sorted(probs)],
                                        type_weight=weight, k=40, model=MODEL))
            score = cos + weight * np.array([probs.get(t, 0.0) for t in types])
            first = np.isin(ids, candidates or [])
            # candidates by cosine alone (the paper's VSS within the candidates), the rest with the bonus
            order = sorted(range(len(ids)), key=lambda i: (not first[i], -(cos[i] if first[i] else score[i]), ids[i]))[:40]
            assert [r[0] for r in got] == [int(ids[i]) for i in order]
            assert [r[2] for r in got] == [bool(first[i]) for i in order]
            assert [r[1] for r in got] == sorted((r[1] for r in got), reverse=True)
        # no candidates and no type: plain VSS
        vec = encode([val[0][2]], MODEL)[0]
        plain = list(sql().focus_rank(conn, skb=SKB, embedding=vec, candidates=None, type_names=[], type_probs=[],
                                      type_weight=0.25, k=10, model=MODEL))
        vss = list(conn.execute("select node_id from stark.vss(%s, %s, 10)", (SKB, vec)))
        assert [r[0] for r in plain] == [r[0] for r in vss]
