"""The figure of `studies/compare_summary.py`: the curves per arm, and the seed-level analysis beside them.

Top row: pass@k and pass^k per arm (percentile bootstrap over seeds and problems, a secondary view) and the training
reward. Bottom row: the seed-level paired differences against the baseline (exploratory, unadjusted t intervals)
and the pre-registered primary endpoints, each drawn with its multiplicity-adjusted interval (level 1 - alpha/m,
Bonferroni) beside its Holm-adjusted p, so that the interval and the p-value in one panel say the same thing.
"""

from __future__ import annotations

from pathlib import Path

from compare_seed_level import METRICS


def plot(summary: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no figure (pip install matplotlib)")
        return False
    ks = summary["ks"]
    sl = summary.get("seed_level") or {"exploratory": {}, "primaries": []}  # none with a single seed
    vs = f" minus {sl['baseline'].upper()}" if "baseline" in sl else ""
    # Top row: the curves, and the training reward. Bottom row: the pre-registered analysis, at the seed level:
    # paired differences vs its baseline with t intervals over seeds (on the absolute scale the trained arms'
    # curves nearly overlap), and the primary endpoints with their Holm-adjusted p-values.
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.4))
    colors = {arm: f"C{i}" for i, arm in enumerate(a for a in summary["arms"] if a != "base")}
    for arm, entry in summary["arms"].items():
        style = dict(color="black", linestyle="--") if arm == "base" else dict(color=colors[arm])
        for ax, metric in zip(axes[0, :2], METRICS):
            value, ci = entry[metric]["value"], entry[metric]["ci"]
            ax.plot(ks, value, marker=".", label=f"{arm} ({len(entry['seeds'])})", **style)
            ax.fill_between(ks, [c[0] for c in ci], [c[1] for c in ci], color=style["color"], alpha=0.15)
        if "train_reward" in entry:
            tr = entry["train_reward"]
            axes[0, 2].plot(tr["step"], tr["mean"], label=arm, **style)
    for arm, metrics in sl["exploratory"].items():
        for ax, metric in zip(axes[1, :2], METRICS):
            d = metrics[metric]
            ax.plot(ks, [100 * v for v in d["mean"]], marker=".", color=colors[arm])
            ax.fill_between(ks, [100 * c[0] for c in d["ci"]], [100 * c[1] for c in d["ci"]], color=colors[arm],
                            alpha=0.15)  # fmt: skip
    for row, unit in ((0, " (95% CI over seeds and problems)"), (1, f"{vs}\n(points; exploratory, unadjusted 95% t CI)")):
        for ax, metric in zip(axes[row, :2], METRICS):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("k")
            ax.set_ylabel(metric + unit)
            ax.grid(alpha=0.3)
    for ax in axes[1, :2]:
        ax.axhline(0, color="black", linewidth=0.8)
    axes[0, 2].legend(*axes[0, 0].get_legend_handles_labels(), loc="lower right", title="arm (seeds)")
    axes[0, 2].set_xlabel("optimizer step")
    axes[0, 2].set_ylabel("training reward (mean over seeds)")
    axes[0, 2].grid(alpha=0.3)
    ax = axes[1, 2]
    primaries = sl["primaries"]
    for y, e in enumerate(primaries):  # the interval that goes with the Holm p: level 1 - alpha/m
        lo, hi = (100 * c for c in e["ci_adjusted"])
        ax.errorbar(100 * e["mean"], y, xerr=[[100 * e["mean"] - lo], [hi - 100 * e["mean"]]], fmt="o", capsize=4,
                    color=colors[e["arm"]])  # fmt: skip
    ax.set_yticks(range(len(primaries)),
                  [f"{e['arm']}: {e['metric']}\n{len(e['seeds'])} seeds, Holm p {e['p_holm']:.2g}" for e in primaries])
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_ylim(max(len(primaries), 1) - 0.5, -0.5)  # an empty panel (no primaries yet) keeps a nonzero range
    level = 1 - sl.get("alpha", 0.05) / max(1, len(primaries))
    ax.set_xlabel(f"primary endpoint{vs} (points;\nmultiplicity-adjusted {level:.1%} t CI, Bonferroni)")
    ax.grid(alpha=0.3, axis="x")
    fig.suptitle(f"SmolLM2-135M-Instruct, {summary['num_problems']} held-out problems x {summary['num_samples']} "
                 "samples")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
