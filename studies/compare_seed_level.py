"""Seed-level inference for `studies/compare_summary.py` and `studies/compare_replication.py`.

The seed is the unit of replication (training noise is shared by every problem of a seed), so every test here is
over per-seed values: paired differences d_s = arm(s) - baseline(s), a t test over seeds, Holm over the
pre-registered primaries, and the intervals that go with them. Also the small exact tools the reports quote: the
SD's chi-square interval (so a detectable effect computed from an observed SD carries that SD's uncertainty), the
sign test, and the seeds at which the baseline sits at the ceiling of an endpoint; and, for post hoc readings
across sets of seeds, Welch's test of two sets' means, a random-effects interval over sets, and each seed's
distance from the base model (one unit, held fixed).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import torch

from ordergrad_trl.core.stats import detectable_effect, seed_t_test
from ordergrad_trl.evaluation.compare_seeds import seed_contrasts

METRICS = ("pass@k", "pass^k")
CEILING = 0.98  # a baseline at or above this on an endpoint leaves an arm little room to gain there


def chi2_ppf(p: float, df: int) -> float:
    """The p-quantile of the chi-square distribution with df degrees of freedom (bisection on its CDF, the
    regularized lower incomplete gamma P(df/2, x/2))."""
    if not 0 < p < 1 or not (isinstance(df, int) and df >= 1):
        raise ValueError(f"need 0 < p < 1 and an integer df >= 1, got p={p!r}, df={df!r}")

    def cdf(x: float) -> float:
        return torch.special.gammainc(torch.tensor(df / 2, dtype=torch.float64),
                                      torch.tensor(x / 2, dtype=torch.float64)).item()  # fmt: skip

    low, high = 0.0, float(df) + 10.0
    while cdf(high) < p:
        low, high = high, 2 * high
    for _ in range(200):
        mid = (low + high) / 2
        if mid in (low, high):
            break
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2


def sd_interval(sd: float, n: int, level: float = 0.95) -> list[float]:
    """The `level` interval of a normal population's SD from a sample SD of n values:
    [sd sqrt(df / chi2_{1-a/2, df}), sd sqrt(df / chi2_{a/2, df})] with df = n - 1."""
    df, a = n - 1, 1 - level
    return [sd * math.sqrt(df / chi2_ppf(1 - a / 2, df)), sd * math.sqrt(df / chi2_ppf(a / 2, df))]


def detectable(sd: float, n: int, alpha: float, power: float) -> dict:
    """The effect a two-sided t test at `alpha` over n seeds detects with `power`, computed from the observed SD,
    and the same at both ends of that SD's 95% interval: the observed SD is an estimate, and so is this effect."""
    low, high = sd_interval(sd, n)
    return {"effect": detectable_effect(sd, n, alpha, power), "sd": sd, "sd_ci": [low, high],
            "effect_range": [detectable_effect(low, n, alpha, power), detectable_effect(high, n, alpha, power)]}  # fmt: skip


def sign_test(diffs) -> dict:
    """Exact two-sided sign test of median(diff) = 0: ties dropped, p = min(1, 2 P(Bin(n, 1/2) >= max(above, below)))."""
    above = sum(d > 0 for d in diffs)
    below = sum(d < 0 for d in diffs)
    n = above + below
    tail = sum(math.comb(n, i) for i in range(max(above, below), n + 1)) / 2**n if n else 1.0
    return {"n": n, "above": above, "below": below, "ties": len(diffs) - n, "p": min(1.0, 2 * tail),
            "p_one_sided": sum(math.comb(n, i) for i in range(above, n + 1)) / 2**n if n else 1.0}  # fmt: skip


def t_sf(t: float, df: float, steps: int = 20_000) -> float:
    """P(T > t) for Student's t with real (e.g. Welch's) degrees of freedom: 1/2 minus Simpson's rule on the density
    over [0, |t|] (`stats.t_cdf` is closed-form for integer df only)."""
    if not df > 0 or math.isnan(t):
        raise ValueError(f"need df > 0 and a number t, got t={t!r}, df={df!r}")
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    x = min(abs(t), 1e6)
    h = x / steps
    f = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(steps + 1)]
    half = h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))  # P(0 < T < x)
    return 0.5 - half if t >= 0 else 0.5 + half


def welch_test(a, b) -> dict:
    """Welch's two-sided t test of mean(a) = mean(b), two independent samples with their own variances."""
    va, vb = (torch.tensor(x, dtype=torch.float64).var().item() / len(x) for x in (a, b))
    diff = sum(a) / len(a) - sum(b) / len(b)
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return {"difference": diff, "t": t, "df": df, "p": min(1.0, 2 * t_sf(abs(t), df))}


def random_effects(means, variances, level: float = 0.95) -> dict:
    """DerSimonian-Laird random-effects combination of independent estimates (`means`, each with its squared
    standard error in `variances`): the between-set variance tau^2 from Cochran's Q, then the inverse-variance mean
    with weights 1 / (v_i + tau^2) and its normal interval. With two sets tau^2 rests on one degree of freedom: an
    exploratory summary, wider than a pooled t interval whenever the sets disagree."""
    w = [1 / v for v in variances]
    fixed = sum(wi * m for wi, m in zip(w, means)) / sum(w)
    q = sum(wi * (m - fixed) ** 2 for wi, m in zip(w, means))
    tau2 = max(0.0, (q - (len(means) - 1)) / (sum(w) - sum(wi**2 for wi in w) / sum(w)))
    w_re = [1 / (v + tau2) for v in variances]
    mean = sum(wi * m for wi, m in zip(w_re, means)) / sum(w_re)
    se, z = 1 / math.sqrt(sum(w_re)), NormalDist().inv_cdf(1 - (1 - level) / 2)
    return {"mean": mean, "ci": [mean - z * se, mean + z * se], "level": level, "tau": math.sqrt(tau2), "q": q,
            "df": len(means) - 1, "fixed_mean": fixed}  # fmt: skip


def minus_base(per_seed, base: float) -> dict:
    """Per-seed values minus the base model's value: the seed-level t test and interval, and the seeds above it.
    The base model is one unit (one evaluation, untrained): its own sampling noise is not in the interval."""
    d = torch.tensor([v - base for v in per_seed], dtype=torch.float64)
    return {**seed_t_test(d), "base": base, "above": int((d > 0).sum())}


def seed_level(summary: dict, baseline: str, alpha: float = 0.05, power: float = 0.8, seen_seeds=()) -> dict:
    """Seed-level inference against `baseline` (the pre-registered analysis, docs/results.md).

    For each arm and metric, d_s = arm(s) - baseline(s) over the seeds both have (each a mean over the problems),
    then a one-sample t test over seeds. Primaries: each arm whose own objective differs from the baseline's, on
    its own objective; their p-values are Holm-adjusted, `ci_adjusted` is the t interval at level 1 - alpha/m
    (Bonferroni, m primaries: it excludes 0 only where Holm rejects), and `detectable` is the effect found with
    `power` at Holm's strictest level alpha/m, from the observed SD (with the range over the SD's 95% interval).
    `ceiling_seeds`: seeds where the baseline's value on the endpoint is at least `CEILING`. `unseen`: the
    primaries on the seeds not in `seen_seeds` (seeds seen when the endpoints were chosen). Everything else is
    exploratory (unadjusted).
    """
    arms, names = summary["arms"], [o["name"] for o in summary["objectives"]]
    own = {arm: o["name"] for o in summary["objectives"] for arm in o["trained_by"]}

    def per_seed(arm: str, metric: str, common: list) -> torch.Tensor:  # (S, n) or (S, m)
        entry = arms[arm]
        return torch.tensor([entry[metric]["per_seed"][entry["seeds"].index(s)] for s in common], dtype=torch.float64)

    def paired(arm: str, metric: str) -> tuple[list, torch.Tensor]:
        common = [s for s in arms[arm]["seeds"] if s in arms[baseline]["seeds"]]
        return common, per_seed(arm, metric, common) - per_seed(baseline, metric, common)

    primaries, exploratory, unseen = [], {}, []
    for arm in arms:
        if arm in ("base", baseline) or len(paired(arm, "pass@k")[0]) < 2:
            continue
        exploratory[arm] = {"seeds": paired(arm, "pass@k")[0]}
        for metric in (*METRICS, "objectives"):
            common, d = paired(arm, metric)  # (S, n) or (S, m)
            tests = [seed_t_test(d[:, j]) for j in range(d.shape[1])]
            exploratory[arm][metric] = {key: [t[key] for t in tests] for key in ("mean", "ci", "p")}
        if own.get(arm) not in (None, own.get(baseline)):
            j = names.index(own[arm])
            common, d = paired(arm, "objectives")
            base_values = per_seed(baseline, "objectives", common)[:, j]
            ceiling = [s for s, v in zip(common, base_values.tolist()) if v >= CEILING]
            primaries.append({"arm": arm, "metric": own[arm], "seeds": common, "per_seed": d[:, j].tolist(),
                              "ceiling_seeds": ceiling, **seed_t_test(d[:, j])})  # fmt: skip
            later = [i for i, s in enumerate(common) if s not in seen_seeds]
            if seen_seeds and len(later) >= 2:
                unseen.append({"arm": arm, "metric": own[arm], "seeds": [common[i] for i in later],
                               **seed_t_test(d[later, j])})  # fmt: skip
    m = len(primaries)
    # the family through `ordergrad-eval compare`'s seed-level contrasts (each arm's per-seed values on its own
    # objective minus the baseline's): the one implementation of the test and Holm
    # (keyed by primary: each pairs the baseline on that arm's seeds)
    values = {e["arm"]: {i: per_seed(e["arm"], "objectives", e["seeds"])[:, names.index(e["metric"])].tolist()}
              for i, e in enumerate(primaries)}  # fmt: skip
    values[baseline] = {i: per_seed(baseline, "objectives", e["seeds"])[:, names.index(e["metric"])].tolist()
                        for i, e in enumerate(primaries)}  # fmt: skip
    family = seed_contrasts(values, {i: (e["arm"], baseline, i) for i, e in enumerate(primaries)}, alpha)
    for i, entry in enumerate(primaries):
        entry["p_holm"], entry["ci_adjusted"] = family[i]["p_holm"], family[i]["ci_adjusted"]
        power_at = detectable(entry["sd"], entry["n"], alpha / m, power)
        entry["detectable"], entry["detectable_range"], entry["sd_ci"] = (power_at[k] for k in ("effect",
                                                                          "effect_range", "sd_ci"))  # fmt: skip
    out = {"baseline": baseline, "alpha": alpha, "power": power, "ceiling": CEILING, "primaries": primaries,
           "exploratory": exploratory}  # fmt: skip
    if seen_seeds:
        out["seen_seeds"], out["unseen"] = list(seen_seeds), unseen
    return out


def base_sign_test(summary: dict) -> dict | None:
    """Did training raise pass@1 over the base model? Each trained unit's pass@1 against the base model's, by a sign
    test over units (which treats the units as independent; units of one seed share data order) and over seeds
    (each seed's mean over the arms it has: one value per seed, independent by construction)."""
    arms = summary["arms"]
    if "base" not in arms:
        return None
    base = arms["base"]["pass@k"]["per_seed"][0][0]
    diffs, by_seed = [], {}
    for arm, entry in arms.items():
        if arm == "base":
            continue
        for s, curve in zip(entry["seeds"], entry["pass@k"]["per_seed"]):
            diffs.append(curve[0] - base)
            by_seed.setdefault(s, []).append(curve[0] - base)
    if not diffs:
        return None
    return {"base_pass@1": base, "units": {**sign_test(diffs), "min": min(diffs), "max": max(diffs)},
            "seeds": sign_test([sum(v) / len(v) for v in by_seed.values()])}  # fmt: skip


def stable(x: float) -> float:
    """`x` rounded to 9 decimals before printing: a mean of counts can be an exact decimal tie (81.15), and the last
    bit of a torch reduction (so the side it rounds to) differs between CPUs; rounded first, it prints alike on all."""
    return round(x, 9)


def seed_span(seeds: list[int]) -> str:
    """Seeds as a reader scans them: "10-24" for a run of consecutive seeds, else "0,3,7"."""
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def _pts(x: float, fmt: str) -> str:
    """x in points; a nonzero value that would round to 0.0 keeps two decimals (its sign is the point)."""
    x = stable(100 * x)
    return f"{x:{fmt.replace('.1f', '.2f')}}" if 0 < abs(x) < 0.05 else f"{x:{fmt}}"


def _cell(value: float, ci: list[float], fmt: str) -> str:
    """"value [low, high]" in %."""
    return f"{_pts(value, fmt)} [{_pts(ci[0], fmt)}, {_pts(ci[1], fmt)}]"


def seed_level_table(sl: dict, head: list[str], ks: list[int], sign: dict | None = None) -> list[str]:
    base, m = sl["baseline"], len(sl["primaries"])
    level = 1 - sl["alpha"] / max(m, 1)
    lines = [f"Pre-registered primary endpoints: each arm's own objective minus {base.upper()}'s, per seed (points), "
             f"two-sided t test over seeds, Holm over the {m} primaries (family-wise alpha {sl['alpha']}). Adjusted "
             f"CI: the t interval at level 1 - alpha/{m} = {level:.1%} (Bonferroni; it excludes 0 only where Holm "
             f"rejects). Detectable: the effect found with {sl['power']:.0%} power at Holm's strictest level, "
             "computed from the observed seed SD, with its range over that SD's 95% chi-square interval. Ceiling: "
             f"seeds where {base.upper()} is at or above {sl['ceiling']:.0%} on the endpoint.", "",
             "| arm | endpoint | seeds | d per seed | mean [95% t CI] | p | Holm p | adjusted CI | detectable "
             "[range] | ceiling seeds |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for e in sl["primaries"]:
        per = " / ".join(f"{stable(100 * d):+.1f}" for d in e["per_seed"])
        lo, hi = e["detectable_range"]
        lines.append(f"| {e['arm']} | {e['metric']} | {len(e['seeds'])} | {per} | {_cell(e['mean'], e['ci'], '+.1f')} "
                     f"| {e['p']:.3g} | {e['p_holm']:.3g} | {_cell(e['mean'], e['ci_adjusted'], '+.1f')} "
                     f"| {stable(100 * e['detectable']):.1f} [{stable(100 * lo):.1f}, {stable(100 * hi):.1f}] "
                     f"| {', '.join(map(str, e['ceiling_seeds'])) or '-'} |")  # fmt: skip
    if sl.get("unseen"):
        seen = ", ".join(map(str, sl["seen_seeds"]))
        lines += ["", f"The endpoints were chosen after seeds {seen} had been seen. Exploratory, the primaries on the "
                  "other seeds alone (unadjusted 95% t CI):", "", "| arm | endpoint | seeds | mean [95% t CI] | p |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for e in sl["unseen"]:
            seeds = f"{e['seeds'][0]}-{e['seeds'][-1]}" if e["seeds"] == list(range(e["seeds"][0], e["seeds"][-1] + 1)) \
                else ", ".join(map(str, e["seeds"]))  # fmt: skip
            lines.append(f"| {e['arm']} | {e['metric']} | {seeds} | {_cell(e['mean'], e['ci'], '+.1f')} | {e['p']:.3g} |")
    if sign:
        u, s = sign["units"], sign["seeds"]
        lines += ["", f"Pass@1 against the base model's {stable(100 * sign['base_pass@1']):.1f}%: above it in {u['above']} of "
                  f"{u['n'] + u['ties']} trained units (by {stable(100 * u['min']):+.1f} to {stable(100 * u['max']):+.1f} points; "
                  f"exact two-sided sign test over units p = {u['p']:.2g}, treating units as independent) and, "
                  f"averaged over the arms at each seed, at {s['above']} of {s['n'] + s['ties']} seeds (sign test "
                  f"over seeds p = {s['p']:.2g})."]  # fmt: skip
    lines += ["", f"Exploratory, seed-level (unadjusted): differences vs {base.upper()} (points, mean [95% t CI over "
              "seeds])", "", "| arm | seeds | " + " | ".join(head) + " |", "|---|---|" + "---|" * len(head)]  # fmt: skip
    for arm, metrics in sl["exploratory"].items():
        cells = [_cell(metrics[m]["mean"][k - 1], metrics[m]["ci"][k - 1], "+.1f")
                 for m, kk in (("pass@k", ks), ("pass^k", ks[1:])) for k in kk]  # fmt: skip
        lines.append(f"| {arm} | {len(metrics['seeds'])} | " + " | ".join(cells) + " |")
    return lines
