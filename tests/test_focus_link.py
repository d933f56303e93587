"""4StepFocus Prepare (Algorithm 3): linking constants and keeping the usable triplets, against the
plain-Python reference (tests/focus_reference.py), on the real slice; and the embedding stage."""

from __future__ import annotations

import difflib
import random

import numpy as np
import psycopg
import pytest

import focus_reference as ref
from stark_pg.embed import encode
from stark_pg.retrieve.focus import link, triplets
from stark_pg.retrieve.focus.triplets import RawTriplet, TripletReply

NO_EMBEDDING = link.LinkSettings(pool=20, ratio=0.8, cosine=2.0)      # string stages only, as the reference


def perturb(name: str, rng: random.Random) -> str:
    """A name as an LLM might copy it: other case, other punctuation or spacing, a typo in one word
    (at least one word kept intact, so a word of the name is shared), a plural."""
    kind = rng.randrange(6)
    if kind == 0:
        return name.upper() if rng.random() < 0.5 else name.lower()
    if kind == 1:
        return name.replace(" ", "-") + rng.choice(["", "!", " ", "."])
    if kind == 2:
        return name.replace("-", " ").replace(",", "")
    words = name.split()
    if kind == 3 and len(words) > 1:
        i = rng.randrange(len(words))
        w = words[i]
        if len(w) > 3:
            j = rng.randrange(1, len(w) - 1)
            words[i] = w[:j] + w[j + 1:]
        return " ".join(words)
    if kind == 4:
        return name + "s"
    return name


@pytest.fixture(scope="module")
def slice_graph(ibd_indexed_url):
    with psycopg.connect(ibd_indexed_url, autocommit=True) as conn:
        skb_id = conn.execute("select stark.skb_id('stark-prime-ibd')").fetchone()[0]
        nodes = {n: (t, name) for n, t, name in conn.execute(
            "select node_id, type, name from stark.node where skb_id = %s", (skb_id,))}
        edges = conn.execute("select src, relation, dst from stark.edge where skb_id = %s", (skb_id,)).fetchall()
    return ref.Graph(nodes, edges)


def test_linking_matches_the_reference(ibd_indexed_url, slice_graph):
    rng = random.Random(5)
    names = sorted((n, t, name) for n, (t, name) in slice_graph.nodes.items() if name)
    types = sorted({t for _, t, _ in names})
    outcomes = {"exact": 0, "string": 0, None: 0}
    with psycopg.connect(ibd_indexed_url, autocommit=True) as conn:
        for i in range(300):
            node, node_type, name = rng.choice(names)
            constant = perturb(name, rng) if i % 10 else rng.choice(["zzqx blorp", "the unknown factor", "x"])
            given_type = rng.choice([node_type, node_type, None, rng.choice(types)])
            got = link.link_constant(conn, "stark-prime-ibd", constant, given_type, NO_EMBEDDING)
            expected = ref.link(slice_graph, constant, given_type, ratio=0.8)
            assert got.node_ids == expected, (constant, given_type, got)
            outcomes[got.how] += 1
    assert outcomes["exact"] > 100 and outcomes["string"] > 20 and outcomes[None] > 20, outcomes


def test_embedding_stage_links_what_strings_miss(ibd_indexed_url):
    with psycopg.connect(ibd_indexed_url, autocommit=True) as conn:
        got = link.link_constant(conn, "stark-prime-ibd", "glucose metabolism", None,
                                 link.LinkSettings(ratio=0.8, cosine=0.8))
        assert got.how == "embedding" and len(got.node_ids) == 1
        vectors = encode(["glucose metabolism", got.names[0]])
        assert float(vectors[0] @ vectors[1]) == pytest.approx(got.score, abs=1e-3) and got.score >= 0.8
        assert difflib.SequenceMatcher(None, "glucose metabolism", link.normalize(got.names[0])).ratio() < 0.8
        # every other shortlisted name is less similar
        rows = list(conn.execute("select name from stark.focus_name_candidates('stark-prime-ibd', "
                                 "'glucose metabolism', 20)"))
        others = [r[0] for r in rows if r[0] != got.names[0]]
        sims = encode(others) @ vectors[0]
        assert np.all(sims <= got.score + 1e-6)
        stricter = link.link_constant(conn, "stark-prime-ibd", "glucose metabolism", None,
                                      link.LinkSettings(ratio=0.8, cosine=0.99))
        assert stricter.how is None and stricter.node_ids == ()


def test_prepare_matches_the_reference(ibd_indexed_url, slice_graph):
    rng = random.Random(9)
    names = sorted((n, t, name) for n, (t, name) in slice_graph.nodes.items() if name)
    with psycopg.connect(ibd_indexed_url, autocommit=True) as conn:
        skb_id = conn.execute("select stark.skb_id('stark-prime-ibd')").fetchone()[0]
        s = triplets.schema(conn, skb_id)
        relations = sorted(s.relation_names) + ["treats", None]
        types = list(s.node_types) + ["medicine", None]
        kept_some = 0
        for _ in range(60):
            variables = [f"?x{i}" for i in range(1, rng.randint(2, 4))]
            raw = []
            for _ in range(rng.randint(1, 4)):
                def end():
                    if rng.random() < 0.5:
                        return rng.choice(variables), rng.choice(types)
                    _, t, name = rng.choice(names)
                    return (perturb(name, rng) if rng.random() < 0.8 else "no such entity"), rng.choice([t, None])
                (h, ht), (t, tt) = end(), end()
                raw.append({"head": h, "head_type": ht, "relation": rng.choice(relations), "tail": t,
                            "tail_type": tt})
            reply = TripletReply(target="?x1", triplets=[RawTriplet(**r) for r in raw])
            prepared = link.prepare(conn, "stark-prime-ibd", reply, s, NO_EMBEDDING)
            exp_vars, exp_triplets = ref.prepare(slice_graph, [r | {"head": r["head"], "tail": r["tail"]} for r in raw],
                                                 "x1", set(s.node_types), s.relation_names, ratio=0.8)
            got_triplets = [] if prepared.problem is None else \
                [{"head": t.head, "relation": t.relation, "tail": t.tail} for t in prepared.problem.triplets]
            assert got_triplets == exp_triplets, raw
            if prepared.problem is not None:
                assert prepared.problem.variables == exp_vars
                kept_some += 1
            assert prepared.linked == bool(exp_triplets)
        assert kept_some > 15


@pytest.mark.parametrize("constant,question,expected", [
    ("Indomethacin", "Which drugs can I take alongside Indomethacin?", True),
    ("C-C chemokines", "proteins that bind to C-C chemokines", True),
    ("chemokine receptor", "proteins binding chemokines at their receptors", True),     # first five letters
    ("HNF4A", "Which drugs treat psoriatic arthritis?", False),                        # copied from an example
    ("male hormones", "my insensitivity to male hormones", True),
    ("PPARA signalling", "what regulates PPARA in the liver", True),                   # half the words
    ("tumour necrosis factor", "drugs against TNF", False),
    ("", "anything", False),
])
def test_grounded_constants_are_named_in_the_question(constant, question, expected):
    assert link.grounded(constant, question, 0.5) is expected
    assert link.grounded(constant, question, 0.0) is True
