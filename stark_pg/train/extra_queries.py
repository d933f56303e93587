"""More training questions for a slice of a larger knowledge base: the full benchmark's training
questions whose answers lie partly inside the slice, with their answers cut to the slice's nodes.

Why: a slice such as `stark-prime-ibd` keeps only the questions whose answers all lie inside it (435
training questions of STaRK-Prime's 6,162). Another 549 training questions have some of their
answers inside it. Their other answers are not candidates here at all, so, cut to the slice, each is
a correct ranking example: these answers above every other node of the slice. A learned ranker
(`stark-pg train fusion --extra-train QA_DIR`) fits on them beside the SKB's own training questions;
they are never scored in its cross-validation, which judges on the SKB's own questions only.

Only questions of the source's `train` split are taken, never one whose id the SKB already holds
(in any split), so validation and test questions cannot come in this way. They are not loaded into
the database: the nearest-question features (type_share, knn_answer) keep drawing on the SKB's own
training split, exactly as they do for a validation question.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

import psycopg

from stark_pg.skb.records import Query


@dataclass
class ExtraQueries:
    queries: list[Query]
    report: dict = field(default_factory=dict)


def extra_training_queries(conn: psycopg.Connection, skb_id: int, source: Iterable[Query],
                           split: str = "train", min_share: float = 0.0) -> ExtraQueries:
    """The `split` questions of `source` that the SKB does not hold, with answers cut to its nodes
    (those left with none, or with less than `min_share` of their answers inside, are dropped). The
    report counts what was read and why each was left out."""
    known = {r[0] for r in conn.execute("select query_id from stark.query where skb_id = %s", (skb_id,))}
    nodes = {r[0] for r in conn.execute("select node_id from stark.node where skb_id = %s", (skb_id,))}
    counts = {"read": 0, "other_split": 0, "already_in_skb": 0, "no_answer_in_skb": 0, "too_few_inside": 0, "kept": 0,
              "answers_kept": 0, "answers_outside": 0}
    kept: list[Query] = []
    for query in source:
        counts["read"] += 1
        if query.split != split:
            counts["other_split"] += 1
            continue
        if query.query_id in known:
            counts["already_in_skb"] += 1
            continue
        inside = [a for a in query.answer_ids if a in nodes]
        if not inside:
            counts["no_answer_in_skb"] += 1
            continue
        if len(inside) < min_share * len(query.answer_ids):
            counts["too_few_inside"] += 1
            continue
        counts["answers_outside"] += len(query.answer_ids) - len(inside)
        counts["kept"] += 1
        counts["answers_kept"] += len(inside)
        kept.append(replace(query, answer_ids=inside))
    return ExtraQueries(kept, counts)


def read_extra_training_queries(conn: psycopg.Connection, skb_id: int, path: Path | str,
                                min_share: float = 0.0) -> ExtraQueries:
    """`extra_training_queries` of a STaRK QA directory (`stark_qa.csv` and `split/train.index`)."""
    from loaders.stark_qa import StarkQaSource

    source = StarkQaSource(Path(path))
    if source.split_of is None:
        raise ValueError(f"{path}: no split/*.index files beside {source.csv.name}, so its training questions "
                         "cannot be told from its validation and test questions")
    return extra_training_queries(conn, skb_id, (q for _, q in source.queries()), min_share=min_share)
