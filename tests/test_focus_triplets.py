"""Parsing the LLM's triplets (4StepFocus step 1): the schema accepts what small models write, rejects
what cannot be used, and the prompt carries the SKB's own types, relations and examples."""

from __future__ import annotations

import json

import psycopg
import pytest
from pydantic import ValidationError

from stark_pg.llm.structured import parse_reply
from stark_pg.retrieve.focus.triplets import TripletReply, messages, schema, variable_name


def test_a_well_formed_reply():
    reply = parse_reply(json.dumps({"target": "?x1", "triplets": [
        {"head": "?x1", "head_type": "drug", "relation": "target", "tail": "SMAD3", "tail_type": "gene/protein"}]}),
        TripletReply)
    assert reply.target == "?x1"
    t = reply.triplets[0]
    assert (t.head, t.head_type, t.relation, t.tail, t.tail_type) == ("?x1", "drug", "target", "SMAD3", "gene/protein")


def test_variants_small_models_write():
    text = ("Here you go:\n```json\n"
            + json.dumps({"target": "x2", "triplets": [["|x2|", "interacts with", "'SMAD3'"],
                                                        {"head": "IL10", "tail": "?X2", "relation": "",
                                                         "extra": 1}]})
            + "\n```")
    reply = parse_reply(text, TripletReply)
    assert reply.target == "?x2"
    first, second = reply.triplets
    assert (first.head, first.relation, first.tail) == ("|x2|", "interacts with", "SMAD3")
    assert variable_name(first.head) == "x2" and variable_name(second.tail) == "x2"
    assert second.relation is None and second.head_type is None
    assert variable_name("SMAD3") is None and variable_name("?gene") == "gene"


@pytest.mark.parametrize("bad", [
    {"triplets": []},                                                    # no target
    {"target": "", "triplets": []},
    {"target": "?x1", "triplets": [{"head": "", "tail": "?x1"}]},         # empty end
    {"target": "?x1", "triplets": [{"head": "?x1", "relation": "r"}]},   # no tail
    {"target": "?x1", "triplets": [["?x1", "r"]]},                       # two items are not a triplet
    {"target": "?x1", "triplets": "?x1 -> r -> SMAD3"},
])
def test_unusable_replies_are_rejected(bad):
    with pytest.raises(ValidationError):
        TripletReply.model_validate(bad)


def test_prompt_is_built_from_the_skb(ibd_indexed_url):
    with psycopg.connect(ibd_indexed_url, autocommit=True) as conn:
        skb_id = conn.execute("select stark.skb_id('stark-prime-ibd')").fetchone()[0]
        s = schema(conn, skb_id)
        types = {r[0] for r in conn.execute("select distinct type from stark.node where skb_id = %s", (skb_id,))}
        relations = {r[0] for r in conn.execute("select distinct relation from stark.edge where skb_id = %s", (skb_id,))}
        assert set(s.node_types) == types and s.relation_names == relations
        assert len(s.examples) == 3
        for question, answer in s.examples:          # every example's constants are real nodes of their type
            reply = TripletReply.model_validate(answer)
            for t in reply.triplets:
                assert t.relation in relations
                for end, end_type in ((t.head, t.head_type), (t.tail, t.tail_type)):
                    assert end_type in types
                    if variable_name(end) is None:
                        assert end in question
                        assert conn.execute("select count(*) from stark.node where skb_id = %s and name = %s "
                                            "and type = %s", (skb_id, end, end_type)).fetchone()[0] >= 1
        chat = messages("Which drugs target SMAD3?", s, n_examples=2)
        text = chat[-1]["content"]
        assert text.endswith("Question: Which drugs target SMAD3?\nJSON:")
        assert "target (drug <-> gene/protein)" in text
        assert text.count("Question:") == 3
        assert messages("q", s, n_examples=0)[-1]["content"].count("Question:") == 1
