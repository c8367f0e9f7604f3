"""The figure of `studies/objective_frontier.py`: every arm's pass@k and pass^k curves, and their differences.

Top row: each arm's pass@k and pass^k at k = 1..16 over seeds; bottom row: its paired difference from the panel's
reference arm, with 95% t bands. Arms with fewer seeds are drawn fainter.
"""

from __future__ import annotations

from pathlib import Path

from compare_seed_level import METRICS, seed_span  # studies/, beside this file


def _curve(ax, ks, values: dict, alpha: float, band_color: str | None = None, **line) -> None:
    """One curve in points (`values`' `mean` per k) and its 95% band (`ci`, when there is one; in the line's color
    unless `band_color`)."""
    ax.plot(ks, [100 * v for v in values["mean"]], **line)
    if values["ci"]:
        ax.fill_between(ks, *zip(*[(100 * lo, 100 * hi) for lo, hi in values["ci"]]),
                        color=band_color or line.get("color"), alpha=alpha)  # fmt: skip


def plot(r: dict, path: Path, side: list[dict], reference: str) -> bool:
    """Draws report `r` to `path`: each arm's main set (top) and its difference from the `reference` arm (bottom);
    a third column per entry of `side` (at most one: a head-to-head with no reference arm, on its own seeds)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no figure (pip install matplotlib)")
        return False
    ks, sets = r["ks"], r["sets"]
    fig, axes = plt.subplots(2, 2 + len(side), figsize=(12 + 5.5 * len(side), 8.4), sharex=True)
    colors = {arm: f"C{i}" for i, arm in enumerate(r["main_sets"])}
    for arm, key in r["main_sets"].items():
        s = sets[key]
        label = f"{arm} (seeds {seed_span(s['seeds'])}, {s['commit'][:7]})"
        most = len(s["seeds"]) == max(len(sets[k]["seeds"]) for k in r["main_sets"].values())
        line, band = dict(color=colors[arm], marker=".", linewidth=2.2 if most else 1.1), 0.15 if most else 0.06  # fewer seeds: fainter
        d = next((e for e in r["differences"] if e["set"] == key and sets[e["minus"]]["arm"] == r["reference"]), None)
        for col, m in enumerate(METRICS):
            _curve(axes[0, col], ks, s[m], band, label=label, **line)
            if d:
                _curve(axes[1, col], ks, d[m], band, **line)
    if r["base"]:
        for col, m in enumerate(METRICS):
            axes[0, col].plot(ks, [100 * v for v in r["base"][m]], color="black", linestyle="--", label="base model")
    for col, m in enumerate(METRICS):
        axes[0, col].set_ylabel(f"{m} (%, 95% t CI over seeds)")
        axes[1, col].set_ylabel(f"{m} minus {reference} at the same seeds\n(points, paired 95% t CI, exploratory)")
    axes[0, 0].legend(loc="lower right", fontsize=8, title="arm (its set)")
    for e in side:
        for key in (e["set"], e["minus"]):
            s = sets[key]
            _curve(axes[0, 2], ks, s["pass@k"], 0.12, color=colors.get(s["arm"]), marker=".", linewidth=1.6,
                   label=f"{s['arm']} (seeds {seed_span(s['seeds'])}, {s['commit'][:7]})")  # fmt: skip
        for m, style in zip(METRICS, ("-", ":")):
            _curve(axes[1, 2], ks, e[m], 0.15, band_color="gray", color="black", linestyle=style, marker=".", label=m)
        a, b = sets[e["set"]]["arm"], sets[e["minus"]]["arm"]
        axes[0, 2].set_title(f"Head-to-head, one commit: {a} and {b}", fontsize=10)
        axes[0, 2].set_ylabel("pass@k (%, 95% t CI over seeds)")
        axes[0, 2].legend(loc="lower right", fontsize=8)
        axes[1, 2].set_ylabel(f"{a} minus {b}, same seeds\n(points, paired 95% t CI)")
        axes[1, 2].legend(loc="upper right", fontsize=8)
    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xlabel("k")
    fig.suptitle(f"Each objective's pass@k frontier: SmolLM2-135M-Instruct, {r['task']}, 8 steps; {r['num_problems']} "
                 f"problems x {r['num_samples']} samples")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
