"""A split described as STaRK's section 3.4 describes its datasets, beside another split.

Questions per template, answers per question (mean and quantiles), question length in words, and the
share of multi-hop questions. A real split has no template: those entries are left out for it. For a
split made with the LLM, what became of every planned item and the share of gold answers that passed
their own verification (STaRK reports this share per dataset).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import psycopg

from stark_pg.resources import queries as sql


def split_stats(conn: psycopg.Connection, skb_id: int, split: str) -> dict:
    rows = list(sql().synth_split_queries(conn, skb_id=skb_id, split=split))
    if not rows:
        raise ValueError(f"the split {split!r} has no questions")
    answers = np.array([len(r[2]) for r in rows])
    words = np.array([len(r[1].split()) for r in rows])
    templates = Counter(r[3] for r in rows if r[3] is not None)
    hops = [r[4] for r in rows if r[4] is not None]
    outcomes = {o: {"items": int(n), "requests": int(calls or 0), "llm_seconds": round(float(sec or 0), 1)}
                for o, n, calls, sec in sql().synth_outcomes(conn, skb_id=skb_id, split=split)}
    verified = sum(outcomes.get(o, {}).get("items", 0) for o in ("kept", "gold rejected"))
    llm = sum(v["requests"] for v in outcomes.values()) > 0
    return {
        "split": split, "questions": len(rows),
        "answers": _summary(answers), "words": _summary(words),
        "templates": dict(templates.most_common()) or None,
        "multi_hop_share": round(sum(h > 1 for h in hops) / len(hops), 3) if hops else None,
        "outcomes": outcomes if llm else None,
        "gold_pass_share": round(outcomes.get("kept", {}).get("items", 0) / verified, 3) if llm and verified else None,
    }


def _summary(values: np.ndarray) -> dict:
    return {"mean": round(float(values.mean()), 2), "median": float(np.median(values)),
            "p10": float(np.percentile(values, 10)), "p90": float(np.percentile(values, 90)),
            "max": int(values.max())}


def plot_stats(stats: list[dict], values: dict[str, tuple[np.ndarray, np.ndarray]], path) -> None:
    """Two histograms (answers per question, words per question), one colour per split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, (answers, words) in values.items():
        axes[0].hist(answers, bins=range(1, int(max(answers.max(), 2)) + 2), alpha=0.5, label=name, density=True)
        axes[1].hist(words, bins=20, alpha=0.5, label=name, density=True)
    axes[0].set_xlabel("answers per question")
    axes[1].set_xlabel("words per question")
    for axis in axes:
        axis.set_ylabel("share of questions")
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def split_values(conn: psycopg.Connection, skb_id: int, split: str) -> tuple[np.ndarray, np.ndarray]:
    rows = list(sql().synth_split_queries(conn, skb_id=skb_id, split=split))
    return np.array([len(r[2]) for r in rows]), np.array([len(r[1].split()) for r in rows])
