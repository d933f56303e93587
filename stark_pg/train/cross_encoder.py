"""Training a cross-encoder over fusion's top ranks (`stark-pg train cross-encoder`), and choosing its weight.

Why it is built this way: fusion is already good (docs/fusion.md), and a cross-encoder fine-tuned from
a small bi-encoder on a few hundred questions was found to rank fusion's top 5 below chance when it
ranked them alone (docs/history/fusion.md, "A cross-encoder trained here"). So the cross-encoder is
trained where it will be used, on fusion's hardest mistakes, and it only ever adds to fusion: search
(`-m fusion-ce`, stark_pg/retrieve/fusion_ce.py) mixes the two z-normalised scores over fusion's top N
with a weight chosen here on held-out training questions, where 0 (fusion alone) is one of the choices.

The steps:
1. A seeded `holdout` share of the first split (the real `train`) is set apart; the model learns from the
   rest and from every other split given (`--splits train,synthetic`).
2. Fusion ranks every question as it would rank a new one: inside a rolled-back transaction the
   questions being ranked (and the held-out ones) leave the training pool, so that fusion's
   nearest-question features never find the question itself or its held-out fellows. The learning
   questions are ranked in `folds` parts, each with its own part out of the pool.
3. Each learning question gives one group per answer (at most `positives`, those fusion ranks first):
   the answer against the `negatives` non-answers fusion ranks highest; the loss is the cross-entropy
   of a softmax over the group. Questions with no answer or no non-answer teach nothing and are skipped.
4. After each epoch, the held-out questions' fusion top `top` are re-scored and every weight in `weights`
   is tried; the weight kept is the one with the best held-out MRR (a tie goes to the smaller weight,
   so 0 wins when the cross-encoder adds nothing), and so is the epoch. val and test are never read.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import psycopg

from stark_pg.embed import canonical_name
from stark_pg.eval import metrics
from stark_pg.eval.query_sets import EvalQuery, learning_sets, learning_splits
from stark_pg.models.cross_encoder import documents, new_cross_encoder, predict, reorder, save_model
from stark_pg.models.fusion import load as load_fusion
from stark_pg.progress import NullReporter, Reporter
from stark_pg.resources import queries as sql
from stark_pg.retrieve import fusion
from stark_pg.skb.catalog import require_skb

HELD_METRICS = ("hit@1", "hit@5", "mrr")
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)


@dataclass
class TrainSettings:
    name: str = "default"
    fusion: str = "default"              # the fusion model whose top ranks it learns on and re-scores
    base_model: str | None = None        # sentence-transformers name or directory (default all-MiniLM-L6-v2)
    splits: str = "train"                # learned from; the held-out share comes from the first only
    holdout: float = 0.2                 # share of the first split held out to choose the weight and epoch
    seed: int = 0
    candidates: int = 20                 # fusion's top ranks read per question (negatives come from them)
    top: int = 10                        # fusion's results re-scored at search; the weight is chosen for it
    negatives: int = 7                   # non-answers per group, fusion's highest first
    positives: int = 2                   # groups per question at most (one per answer)
    max_length: int = 128                # tokens of question + document
    epochs: int = 1
    lr: float = 5e-5
    batch: int = 1                       # groups per optimiser step
    folds: int = 5                       # parts the learning questions are ranked in, each out of the pool
    weights: tuple = WEIGHTS             # the weights tried on the held-out questions (0 among them)
    threads: int = 2                     # torch threads while training
    limit: int | None = None             # only the first N learning and held-out questions (a quick run)

    def checked(self) -> "TrainSettings":
        for name, low in (("candidates", 2), ("top", 1), ("negatives", 1), ("positives", 1), ("max_length", 16),
                          ("epochs", 1), ("batch", 1), ("folds", 1), ("threads", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"--{name.replace('_', '-')} must be at least {low}, not {getattr(self, name)}")
        if self.top > self.candidates:
            raise ValueError(f"--top {self.top} cannot exceed --candidates {self.candidates} (fusion's ranks read)")
        if not 0 < self.lr < 1:
            raise ValueError(f"--lr must be in (0, 1), not {self.lr}")
        if not self.weights or min(self.weights) < 0:
            raise ValueError(f"--weights must be one or more weights of at least 0, not {self.weights}")
        self.weights = tuple(sorted({0.0, *(float(w) for w in self.weights)}))     # fusion alone is always tried
        return self


@dataclass
class Ranked:
    """A question and fusion's top `candidates` for it, ranked as for a new question."""
    query: EvalQuery
    node_ids: list[int]
    scores: list[float]


@dataclass
class Group:
    query: str
    node_ids: list[int]                  # the answer first, then the non-answers


@dataclass
class TrainReport:
    name: str
    path: str
    weight: float
    top: int
    best_epoch: int
    metrics: dict                        # held-out: fusion alone, cross-encoder alone, mixed at the weight
    learning_questions: int
    heldout_questions: int
    groups: int
    rank_seconds: float
    train_seconds: float
    history: list = field(default_factory=list)


def fold_parts(n: int, folds: int, seed: int) -> list[np.ndarray]:
    """The positions of n questions in `folds` seeded parts (fewer when there are fewer questions)."""
    return np.array_split(np.random.default_rng(seed).permutation(n), min(folds, max(n, 1)))


def rank_with_fusion(conn: psycopg.Connection, skb_id: int, skb: str, queries: list[EvalQuery], apart: list[int],
                     settings: TrainSettings, folds: int, progress: Reporter, label: str) -> list[Ranked]:
    """Fusion's top `candidates` of each question, ranked in `folds` seeded parts: while a part is ranked,
    it and the questions `apart` are out of the training pool (a rolled-back transaction), so that no
    question is ranked with itself, or a held-out question, among the nearest training questions."""
    parts = fold_parts(len(queries), folds, settings.seed)
    out: list[Ranked | None] = [None] * len(queries)
    options = fusion.Options(name=settings.fusion)
    with progress.stage(label, total=len(queries)) as stage:
        for part in parts:
            mine = [queries[int(i)] for i in part]
            with conn.transaction(force_rollback=True):
                sql().cross_encoder_out_of_pool(conn, skb_id=skb_id,
                                                query_ids=[q.query_id for q in mine] + list(apart))
                for i, q in zip(part, mine):
                    hits = fusion.search(conn, skb, q.body, settings.candidates, options).hits
                    out[int(i)] = Ranked(q, [h.node_id for h in hits], [h.score for h in hits])
                    stage.advance()
    return out


def groups_of(ranked: list[Ranked], settings: TrainSettings) -> list[Group]:
    """One group per answer (at most `positives`; those fusion ranks first, then the rest in id order):
    the answer and the `negatives` non-answers fusion ranks highest."""
    out = []
    for r in ranked:
        answers = set(r.query.answer_ids)
        negatives = [n for n in r.node_ids if n not in answers][:settings.negatives]
        found = [n for n in r.node_ids if n in answers]
        positives = (found + sorted(answers - set(found)))[:settings.positives]
        if negatives:
            out += [Group(r.query.body, [p, *negatives]) for p in positives]
    return out


def held_out_metrics(ranked: list[Ranked], ce_scores: list[np.ndarray], weights, top: int) -> dict:
    """{weight: mean metrics}, with "fusion" (weight 0) and "cross-encoder" (its score alone over the top,
    ties in fusion's order) among them: each question's fusion top `top` re-ordered, the rest after."""
    def ranking(r: Ranked, scores, weight) -> list[int]:
        head = r.node_ids[:top]
        if weight is None:      # the cross-encoder alone
            order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
            new = [head[i] for i in order]
        else:
            new = [n for n, _ in reorder(head, r.scores[:top], scores, weight)]
        return new + r.node_ids[top:]

    out = {}
    for key, weight in [*((f"{w:g}", w) for w in weights), ("cross-encoder", None)]:
        per = [metrics.evaluate(ranking(r, s, weight), r.query.answer_ids, names=HELD_METRICS)
               for r, s in zip(ranked, ce_scores)]
        out[key] = {m: round(v, 4) for m, v in metrics.summarize(per).items()} if per else {}
    return out


def choose_weight(measured: dict, weights) -> float:
    """The weight with the best held-out MRR; a tie goes to the smaller weight (0 on a tie with fusion)."""
    return max(weights, key=lambda w: (measured[f"{w:g}"].get("mrr", 0.0), -w))


def score_held(model, conn, skb: str, ranked: list[Ranked], top: int, progress: Reporter) -> list[np.ndarray]:
    """The cross-encoder's score of each held-out question's fusion top `top`."""
    wanted = sorted({n for r in ranked for n in r.node_ids[:top]})
    docs = documents(conn, skb, wanted)
    out = []
    with progress.stage("held-out questions: scoring", total=len(ranked)) as stage:
        for r in ranked:
            out.append(predict(model, r.query.body, [docs.get(n, "") for n in r.node_ids[:top]]))
            stage.advance()
    return out


def fit(model, groups: list[Group], docs: dict[int, str], settings: TrainSettings, after_epoch,
        progress: Reporter) -> tuple[list, int]:
    """Train `model` in place, calling after_epoch(epoch, loss) -> held-out MRR after each epoch; load the
    best epoch's weights. (history, best epoch)."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    rng = np.random.default_rng(settings.seed)
    torch.manual_seed(settings.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.01)
    steps = settings.epochs * -(-len(groups) // settings.batch)
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    history, best = [], (-1.0, 0, None)
    for epoch in range(1, settings.epochs + 1):
        started = time.perf_counter()
        model.train()
        order = rng.permutation(len(groups))
        total = 0.0
        with progress.stage(f"epoch {epoch} of {settings.epochs}: groups", total=len(groups)) as stage:
            for start in range(0, len(order), settings.batch):
                chunk = [groups[int(i)] for i in order[start:start + settings.batch]]
                pairs = [(g.query, docs.get(n, "")) for g in chunk for n in g.node_ids]
                features = model.preprocess(pairs)
                scores = model(features)["scores"].reshape(-1)
                losses, at = [], 0
                for g in chunk:
                    s = scores[at:at + len(g.node_ids)]
                    losses.append(torch.logsumexp(s, 0) - s[0])      # -log softmax of the answer
                    at += len(g.node_ids)
                loss = torch.stack(losses).mean()
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                total += float(loss.detach()) * len(chunk)
                stage.advance(len(chunk))
        model.eval()
        mrr, entry = after_epoch(epoch)
        history.append({"epoch": epoch, "loss": round(total / max(len(groups), 1), 5), **entry,
                        "seconds": round(time.perf_counter() - started, 2)})
        if mrr > best[0]:
            best = (mrr, epoch, copy.deepcopy(model.state_dict()) if settings.epochs > 1 else None)
    if best[2] is not None:
        model.load_state_dict(best[2])
    model.eval()
    return history, best[1]


def train_cross_encoder(conn: psycopg.Connection, skb: str, settings: TrainSettings | None = None,
                        progress: Reporter | None = None) -> TrainReport:
    """Train a cross-encoder over fusion's top ranks on the SKB's training questions, choose its weight on
    held-out ones, and store it (files and stark.trained_model)."""
    import torch

    settings = (settings or TrainSettings()).checked()
    progress = progress or NullReporter()
    skb_id = require_skb(conn, skb)
    load_fusion(conn, skb_id, skb, settings.fusion)       # a missing fusion model fails now, not after minutes
    learn, held = learning_sets(conn, skb_id, learning_splits(settings.splits), settings.holdout, settings.seed)
    for chosen, role in ((learn, "learning"), (held, "held-out")):
        if settings.limit:
            chosen.queries = chosen.queries[:settings.limit]
        if not chosen.queries:
            raise ValueError(f"SKB {skb!r} has no {role} questions in --splits {settings.splits!r}")
    held_ids = [q.query_id for q in held.queries]

    started = time.perf_counter()
    ranked_learn = rank_with_fusion(conn, skb_id, skb, learn.queries, held_ids, settings, settings.folds, progress,
                                    "fusion: learning questions")
    ranked_held = rank_with_fusion(conn, skb_id, skb, held.queries, [], settings, 1, progress,
                                   "fusion: held-out questions")
    groups = groups_of(ranked_learn, settings)
    if not groups:
        raise ValueError(f"no learning question of SKB {skb!r} has both an answer and a non-answer to learn from")
    docs = documents(conn, skb, sorted({n for g in groups for n in g.node_ids}))
    rank_seconds = time.perf_counter() - started

    started = time.perf_counter()
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        torch.manual_seed(settings.seed)
        model = new_cross_encoder(settings.base_model, settings.max_length)
        measured_by_epoch = {}

        def after_epoch(epoch: int):
            scores = score_held(model, conn, skb, ranked_held, settings.top, progress)
            measured = held_out_metrics(ranked_held, scores, settings.weights, settings.top)
            weight = choose_weight(measured, settings.weights)
            measured_by_epoch[epoch] = (weight, measured)
            return measured[f"{weight:g}"]["mrr"], {"weight": weight, "holdout": measured}

        history, best_epoch = fit(model, groups, docs, settings, after_epoch, progress)
    finally:
        torch.set_num_threads(torch_threads)
    train_seconds = time.perf_counter() - started

    weight, measured = measured_by_epoch[best_epoch]
    summary = {"fusion": measured["0"], "cross-encoder": measured["cross-encoder"], "mixed": measured[f"{weight:g}"]}
    base = canonical_name(settings.base_model)
    stored_settings = {**asdict(settings), "weights": list(settings.weights), "base_model": base, "weight": weight,
                       "learning_questions": len(learn.queries), "heldout_questions": len(held.queries),
                       "groups": len(groups), "epoch": best_epoch}
    stored_metrics = {f"holdout_{k}": v for k, v in summary.items()} | {
        "weight": weight, "top": settings.top, "epoch": best_epoch, "rank_seconds": round(rank_seconds, 1),
        "train_seconds": round(train_seconds, 1)}
    path = save_model(conn, skb_id, skb, settings.name, base, model, stored_settings, history, stored_metrics)
    return TrainReport(settings.name, str(path), weight, settings.top, best_epoch, summary, len(learn.queries),
                       len(held.queries), len(groups), rank_seconds, train_seconds, history)
