"""How a report looks: the markdown tables of report.md and the pass@k / pass^k plot of passk.png."""

from __future__ import annotations

import math
import warnings
from pathlib import Path


def _fmt(m: dict, pct: bool) -> str:
    if m is None or math.isnan(m["value"]):
        return "n/a"
    lo, hi = m["ci"]
    if pct:
        return f"{100 * m['value']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"
    return f"{m['value']:.3f} [{lo:.3f}, {hi:.3f}]"


def render_markdown(report: dict, binary_reward: bool) -> str:
    """report.md: per benchmark, the metric table over k (in % where the reward is 0/1), objectives, breakdowns."""
    cfg, settings = report["config"], report.get("generation") or {}
    lines = ["# Evaluation report", ""]
    if settings.get("model") == "reference":
        lines.append("Samples: each problem's own reference solution (`--backend reference`). ")
    elif settings:
        lines.append(
            f"Model `{settings.get('model')}`"
            + (f" (adapter on `{settings['base']}`)" if settings.get("adapter") else "")
            + f"; temperature {settings.get('temperature')}, top_p {settings.get('top_p')}, "
            f"max_new_tokens {settings.get('max_new_tokens')}. "
        )
    lines += [
        (
            f"Values in % with {int(100 * cfg['ci_level'])}% bootstrap CIs over problems "
            f"({cfg['bootstrap_samples']} replicates). Reward for best/worst/CVaR/objectives: "
            f"`{cfg['reward_weights']}`."
        ),
        "",
    ]
    for name, ds in report["datasets"].items():
        ks, mets = ds["ks"], ds["metrics"]
        tokens = ds["mean_completion_tokens"]
        lines += [
            f"## {name}", "",
            f"{ds['num_problems']} problems, n = {ds['num_samples']} samples each"
            + (f", {ds['unscorable_problems']} with an unparseable gold (left out)" if ds["unscorable_problems"]
               else "")
            + (f", {ds['missing_samples']} samples missing" if ds["missing_samples"] else "")
            + (f" ({ds['problems_not_generated']} more problems in problems.jsonl not generated yet)"
               if ds["problems_not_generated"] else "")
            + (f", {ds['samples_not_scored']} samples not scored yet (run eval.score)" if ds["samples_not_scored"]
               else "")
            + (f", {ds['samples_timed_out']} samples timed out in math-verify (scored 0, or unscorable where the "
               "gold's parse did; raise --reward_timeout_s)" if ds.get("samples_timed_out") else "")
            + (f"; mean completion {tokens:.0f} tokens, {100 * ds['truncated_fraction']:.0f}% truncated"
               if tokens is not None else "") + ".", "",
            "| metric | " + " | ".join(f"k={k}" for k in ks) + " |",
            "|---|" + "---|" * len(ks),
        ]
        rows = [("pass@k", "pass@{}", True), ("pass^k", "pass^{}", True), ("maj@k", "maj@{}", True)]
        if not binary_reward:
            rows += [("best@k (reward)", "best@{}", False), ("worst@k (reward)", "worst@{}", False)]
        q = f"{cfg['cvar_q']:g}"
        rows.append((f"CVaR{q}@k (reward)", "cvar" + q + "@{}", binary_reward))
        for label, pattern, pct in rows:
            lines.append(f"| {label} | " + " | ".join(_fmt(mets.get(pattern.format(k)), pct) for k in ks) + " |")
        extra = [m for m in mets if "@" in m and not m.startswith(("pass", "maj", "best", "worst", "cvar"))]
        if extra or not binary_reward:
            lines += ["", "| objective (reward) | value |", "|---|---|"]
            if not binary_reward:
                lines.append(f"| mean reward | {_fmt(mets['mean_reward'], False)} |")
            lines += [f"| {m} | {_fmt(mets[m], binary_reward)} |" for m in extra]
        kmax = ks[-1]
        for fld, groups in ds["breakdown"].items():
            cols = ["pass@1", f"pass@{kmax}", f"pass^{kmax}", f"maj@{kmax}"]
            cols = list(dict.fromkeys(cols))
            lines += ["", f"| {fld} | problems | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
            for g, gd in groups.items():
                lines.append(f"| {g} | {gd['num_problems']} | "
                             + " | ".join(_fmt(gd["metrics"].get(c), True) for c in cols) + " |")
        lines.append("")
    if report.get("plot"):
        lines += [f"![pass@k and pass^k]({Path(report['plot']).name})", ""]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> bool:
    """pass@k (solid) and pass^k (dashed) against k per benchmark, CI bands; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("matplotlib is not installed (pip install 'ordergrad-trl[plot]'): no plot written",
                      stacklevel=2)
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    all_ks = set()
    for idx, (name, ds) in enumerate(report["datasets"].items()):
        color = f"C{idx % 10}"
        ks = ds["ks"]
        all_ks.update(ks)
        for pattern, style, marker, label in (("pass@{}", "-", "o", "pass@k"), ("pass^{}", "--", "s", "pass^k")):
            ms = [ds["metrics"][pattern.format(k)] for k in ks]
            ax.plot(ks, [100 * m["value"] for m in ms], style, marker=marker, markerfacecolor="none" if marker == "s"
                    else color, color=color, label=f"{name} {label}")
            ax.fill_between(ks, [100 * m["ci"][0] for m in ms], [100 * m["ci"][1] for m in ms], color=color,
                            alpha=0.12, linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(all_ks), [str(k) for k in sorted(all_ks)])
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("% of problems")
    top = max((100 * ds["metrics"][f"pass@{k}"]["ci"][1] for ds in report["datasets"].values() for k in ds["ks"]
               if not math.isnan(ds["metrics"][f"pass@{k}"]["ci"][1])), default=100)
    ax.set_ylim(-1, min(101, 1.1 * top + 2))  # small models live near 0: do not squash them against 100%
    ax.grid(alpha=0.3)
    title = (report.get("generation") or {}).get("model") or ""
    ax.set_title(f"pass@k (solid), pass^k (dashed): {Path(str(title)).name}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
