"""The agent's learning history as a PNG: per category, the batch MRR of each program by iteration
(the seed is iteration 0) and the held-out MRR of the one kept."""

from __future__ import annotations

from pathlib import Path


def plot_history(report, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for category in report.categories:
        points = sorted((h["iteration"], h["batch_mrr"]) for h in category.history)
        if not points:
            continue
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=category.category)
        chosen = next((h for h in category.history if h["chosen"]), None)
        if chosen:
            ax.scatter([chosen["iteration"]], [chosen["holdout_mrr"]], marker="*", s=140, color=line.get_color(),
                       zorder=3)
    ax.set_xlabel("iteration (0 = seed program; failed or rejected programs have no point)")
    ax.set_ylabel("MRR on the category's training batch")
    ax.set_title(f"agent run {report.run_id}: programs per category (star: kept, its held-out MRR)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
