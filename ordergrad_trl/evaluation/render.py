"""How a report looks: the markdown tables of report.md and the pass@k / pass^k plot of passk.png.

Which metric shows where, under which label, in % or not, comes from `metrics.METRICS`; every `--objectives`
entry (report.json `objectives`) has a row of its own."""

from __future__ import annotations

import io
import math
import warnings
from pathlib import Path

from . import safe_io
from .metrics import METRICS
from .protocol_header import protocol_lines


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
    lines = ["# Evaluation report", "", *protocol_lines(report.get("protocol"))]
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
            + (f"; mean completion tokens {tokens:.1f} (over all samples), {100 * ds['truncated_fraction']:.0f}% "
               "truncated at max_new_tokens" if tokens is not None else "") + ".", "",
            "| metric | " + " | ".join(f"k={k}" for k in ks) + " |",
            "|---|" + "---|" * len(ks),
        ]
        for m in METRICS.values():
            if m.per_k and "table" in m.shows and m.visible(binary_reward):
                lines.append(f"| {m.label_at(cfg)} | " + " | ".join(
                    _fmt(mets.get(m.key_at(k, cfg)), m.percent(binary_reward)) for k in ks) + " |")
        single = [m for m in METRICS.values() if not m.per_k and "table" in m.shows and m.visible(binary_reward)]
        if single:  # one value each, in the unit its row gives
            lines += ["", "| metric | value |", "|---|---|"]
            lines += [f"| {m.label_at(cfg)} | {_fmt(mets.get(m.key_at(None, cfg)), m.percent(binary_reward))} |"
                      for m in single]
        objectives = ds.get("objectives", {})
        if objectives:  # --objectives: L-statistics of the reward, a rate when it is 0/1
            lines += ["", "| objective (reward) | value |", "|---|---|"]
            lines += [f"| {key} | {_fmt(value, binary_reward)} |" for key, value in objectives.items()]
        at = {"first": ks[0], "last": ks[-1]}
        cols = list(dict.fromkeys(m.key_at(at[which], cfg) for m in METRICS.values() if "breakdown" in m.shows
                                  and m.visible(binary_reward) for which in m.breakdown_ks))
        pct = {m.key_at(k, cfg): m.percent(binary_reward) for m in METRICS.values() for k in ks}
        for fld, groups in ds["breakdown"].items():
            lines += ["", f"| {fld} | problems | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
            for g, gd in groups.items():
                lines.append(f"| {g} | {gd['num_problems']} | "
                             + " | ".join(_fmt(gd["metrics"].get(c), pct.get(c, True)) for c in cols) + " |")
        lines.append("")
    if report.get("plot"):
        alt = " and ".join(m.label_at(cfg) for m in METRICS.values() if "plot" in m.shows)
        lines += [f"![{alt}]({Path(report['plot']).name})", ""]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> bool:
    """The metrics shown on the plot (pass@k solid, pass^k dashed) against k per benchmark, CI bands; False if
    matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("matplotlib is not installed (pip install 'ordergrad-trl[plot]'): no plot written",
                      stacklevel=2)
        return False
    cfg, shown = report["config"], [m for m in METRICS.values() if "plot" in m.shows and m.per_k]
    values = [ds["metrics"][m.key_at(k, cfg)]["value"] for ds in report["datasets"].values() for m in shown
              for k in ds["ks"]]  # fmt: skip
    if not any(math.isfinite(v) for v in values if v is not None):  # matplotlib's log axis fails on no data at all
        warnings.warn("no plot written: no metric has a value (every problem was left out: an unparseable gold, or "
                      "no sample scored); the report's tables say why", stacklevel=2)
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    all_ks, tops = set(), []
    for idx, (name, ds) in enumerate(report["datasets"].items()):
        color = f"C{idx % 10}"
        ks = ds["ks"]
        all_ks.update(ks)
        for m in shown:
            style, marker = m.plot_style
            ms = [ds["metrics"][m.key_at(k, cfg)] for k in ks]
            ax.plot(ks, [100 * x["value"] for x in ms], style, marker=marker, markerfacecolor="none"
                    if style != "-" else color, color=color, label=f"{name} {m.label_at(cfg)}")
            ax.fill_between(ks, [100 * x["ci"][0] for x in ms], [100 * x["ci"][1] for x in ms], color=color,
                            alpha=0.12, linewidth=0)
            tops += [100 * x["ci"][1] for x in ms if not math.isnan(x["ci"][1])]
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(all_ks), [str(k) for k in sorted(all_ks)])
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("% of problems")
    # small models live near 0: do not squash them against 100%
    ax.set_ylim(-1, min(101, 1.1 * max(tops, default=100) + 2))
    ax.grid(alpha=0.3)
    title = (report.get("generation") or {}).get("model") or ""
    styles = ", ".join(f"{m.label_at(cfg)} ({'solid' if m.plot_style[0] == '-' else 'dashed'})" for m in shown)
    ax.set_title(f"{styles}: {Path(str(title)).name}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    safe_io.write_bytes_atomic(path, buf.getvalue())  # never into a file another run shares (a hard link)
    return True
