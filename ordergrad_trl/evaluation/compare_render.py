"""How a comparison looks: compare.md's tables and compare.png's difference against k.

Which metric is shown in points (a rate) and which as a raw value comes from `metrics.METRICS`, as in report.md;
`--objectives` are on the reward, a rate when it is 0/1."""

from __future__ import annotations

import io
import math
import warnings
from pathlib import Path

from . import safe_io
from .metrics import METRICS
from .protocol_header import MISMATCH_FIELDS, protocol_lines

__all__ = ["plot_differences", "render_compare"]


def _is_percent(key: str, plan, ks: list[int]) -> bool:
    """Whether `key` (a metric at one of `ks`, or an objective) is shown in points, as report.md shows it."""
    config, binary = plan.config, plan.reward.binary
    if key in {o.key for o in plan.objectives}:
        return binary
    units = {m.key_at(k, config): m.percent(binary) for m in METRICS.values() for k in (ks if m.per_k else (None,))}
    return units.get(key, False)


def _num(x: float, pct: bool, sign: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * x:{'+' if sign else ''}.1f}" if pct else f"{x:{'+' if sign else ''}.3f}"


def _p(p: float) -> str:
    return f"{p:.3g}"


def render_compare(result: dict, plan) -> str:
    """compare.md: the protocol, allowed differences, then per comparison and dataset one table of differences."""
    level = f"{100 * plan.ci_level:g}%"
    lines = ["# Comparison", ""]
    base = result["base"]
    header = result["protocol"].get(result["runs"][0] if isinstance(result["runs"], list)
                                    else next(iter(result["runs"].values()))[0])
    lines += [f"Base: `{base}`. Base protocol:", "", *protocol_lines(header)]
    if result["allowed_mismatches"]:
        lines += ["**Protocols differ** (allowed by --allow_mismatch): "
                  + "; ".join(f"{name} ({MISMATCH_FIELDS[name][0]}): {', '.join(v)}"
                              for name, v in result["allowed_mismatches"].items()) + ".", ""]
    if "comparisons" in result:
        lines += [f"OTHER - BASE per problem (points for rates): mean paired difference, {level} percentile bootstrap "
                  f"interval over problems ({plan.bootstrap_samples} replicates), two-sided paired sign-flip p-value "
                  "(exact up to 16 nonzero differences), unadjusted for multiplicity.", ""]
        for comp in result["comparisons"]:
            for ds, d in comp["datasets"].items():
                lines += [f"## `{comp['other']}` - `{comp['base']}` on {ds}", "",
                          f"{d['num_problems']} problems paired.", "",
                          "| metric | base | other | difference [CI] | p | problems |", "|---|---|---|---|---|---|"]
                for key, e in {**d["metrics"], **d["objectives"]}.items():
                    pct = _is_percent(key, plan, d["ks"])
                    lines.append(f"| {key} | {_num(e['base'], pct)} | {_num(e['other'], pct)} | "
                                 f"{_num(e['difference'], pct, True)} [{_num(e['ci'][0], pct, True)}, "
                                 f"{_num(e['ci'][1], pct, True)}] | {_p(e['p_value'])} | {e['num_problems']} |")
                lines.append("")
    if "seed_level" in result:
        sl = result["seed_level"]
        pairs = "each contrast's GROUP(s) - MINUS(s)" if "contrasts" in sl else f"group(s) - {sl['baseline']}(s)"
        lines += [f"Seed level: per seed, {pairs}, each run's value its mean over the problems "
                  f"every run scored; two-sided t test over seeds, {level} t interval; Holm over all "
                  f"{sl['family_size']} tests (family-wise alpha {sl['alpha']}); adjusted CI: the t interval at level "
                  f"1 - alpha/{sl['family_size']} (Bonferroni).", ""]
        for label, c in sl.get("contrasts", {}).items():
            for ds, e in c["datasets"].items():
                pct = _is_percent(c["metric"], plan, e["ks"])
                lines += [f"## {label} on {ds}", "", f"{e['num_problems']} problems.", "",
                          "| metric | seeds | d per seed | mean [t CI] | p | Holm p | adjusted CI |",
                          "|---|---|---|---|---|---|---|", _seed_row(c["metric"], e, pct), ""]
        for name, g in sl.get("groups", {}).items():
            for ds, d in g["datasets"].items():
                lines += [f"## {name} - {sl['baseline']} on {ds}", "", f"{d['num_problems']} problems.", "",
                          "| metric | seeds | d per seed | mean [t CI] | p | Holm p | adjusted CI |",
                          "|---|---|---|---|---|---|---|"]
                for key, e in {**d["metrics"], **d["objectives"]}.items():
                    lines.append(_seed_row(key, e, _is_percent(key, plan, d["ks"])))
                lines.append("")
    if result.get("plot"):
        lines += [f"![difference against k]({Path(result['plot']).name})", ""]
    return "\n".join(lines)


def _seed_row(key: str, e: dict, pct: bool) -> str:
    per = " / ".join(_num(x, pct, True) for x in e["per_seed"])
    return (f"| {key} | {e['num_seeds']} | {per} | {_num(e['difference'], pct, True)} [{_num(e['ci'][0], pct, True)}, "
            f"{_num(e['ci'][1], pct, True)}] | {_p(e['p_value'])} | {_p(e['p_holm'])} | "
            f"[{_num(e['ci_adjusted'][0], pct, True)}, {_num(e['ci_adjusted'][1], pct, True)}] |")


def _curves(result: dict):
    """(label, ks, [(metric label, [difference], [low], [high])]) per comparison and dataset."""
    shown = [m for m in METRICS.values() if "plot" in m.shows and m.per_k]
    blocks = [(f"{c['other']} - {c['base']}", c["datasets"]) for c in result.get("comparisons", [])]
    if "seed_level" in result:
        sl = result["seed_level"]
        blocks += [(f"{name} - {sl['baseline']}", g["datasets"]) for name, g in sl.get("groups", {}).items()]
    for label, datasets in blocks:
        for ds, d in datasets.items():
            lines = []
            for m in shown:
                keys = [m.key.format(k=k) for k in d["ks"]]
                if all(k in d["metrics"] for k in keys):
                    es = [d["metrics"][k] for k in keys]
                    lines.append((m, [e["difference"] for e in es], [e["ci"][0] for e in es], [e["ci"][1] for e in es]))
            if lines:
                yield f"{label} ({ds})", d["ks"], lines


def plot_differences(result: dict, plan, path: Path) -> bool:
    """compare.png: each comparison's difference (points) against k with its interval; False without matplotlib."""
    curves = list(_curves(result))
    if not curves:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("matplotlib is not installed (pip install 'ordergrad-trl[plot]'): no plot written", stacklevel=2)
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    all_ks = set()
    for idx, (label, ks, lines) in enumerate(curves):
        color = f"C{idx % 10}"
        all_ks.update(ks)
        for m, diff, low, high in lines:
            style, marker = m.plot_style
            ax.plot(ks, [100 * x for x in diff], style, marker=marker, color=color,
                    label=f"{label} {m.label_at(plan.config)}")
            ax.fill_between(ks, [100 * x for x in low], [100 * x for x in high], color=color, alpha=0.12, linewidth=0)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(all_ks), [str(k) for k in sorted(all_ks)])
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("difference (points)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    safe_io.write_bytes_atomic(path, buf.getvalue())
    return True
