"""Confidence intervals and tests for evaluation results: the one statistics module of eval and the studies/ summaries.

Two units of replication, two tools:

- **Problems** (one model, P problems): `bootstrap_ci`, a percentile bootstrap of the mean over problems. Two
  runs scored on the same problems are compared by bootstrapping their per-problem differences (paired), and
  tested by `sign_flip_pvalue`, the paired permutation test of those differences.
- **Seeds** (S trained models per arm): the seed is the unit, since training noise is shared by every problem of
  a seed. `seed_t_test` gives a t interval and a two-sided p-value for the mean of per-seed (paired) differences,
  `holm` adjusts a family of p-values, `seed_tests` does both for a family (with the Bonferroni interval that goes
  with Holm's first step: `ordergrad-eval compare --groups` and the studies' drivers), `detectable_effect` is the
  effect such a test detects with given power, and `wilcoxon_exact` is the exact signed-rank test beside the t
  test (a robustness check of the studies).
  `resample_means` bootstraps seeds and problems together (a secondary view: with few seeds its seed part is
  crude, as it resamples only S values).

Pure Python and torch; the Student t distribution is computed here in closed form (integer degrees of freedom)
and tested against scipy.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "bootstrap_ci",
    "detectable_effect",
    "holm",
    "percentile_interval",
    "resample_means",
    "seed_t_test",
    "seed_tests",
    "sign_flip_pvalue",
    "t_cdf",
    "t_ppf",
    "wilcoxon_exact",
]


# ------------------------------------------------------------------------------------------ over problems
def bootstrap_ci(
    values: torch.Tensor, num_samples: int = 1_000, level: float = 0.95, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Percentile bootstrap CI of the mean over problems, resampling problems with replacement.

    Args:
        values: `(M, P)` per-problem values of M metrics (or `(P,)`); NaN problems are left out of each mean,
            as in the point estimate. All metrics share the same resampled problem sets (seeded).
        num_samples: bootstrap replicates B.
        level: coverage of the interval.

    Returns:
        (low, high), each `(M,)` (or scalars for 1-D input); NaN where a metric has no valid problem.
    """
    values = torch.as_tensor(values, dtype=torch.float64)
    squeeze = values.dim() == 1
    values = values[None] if squeeze else values
    if values.dim() != 2:
        raise ValueError(f"values must have shape (P,) or (M, P), got {tuple(values.shape)}")
    if not (isinstance(num_samples, int) and num_samples >= 1) or not 0 < level < 1:
        raise ValueError(f"need num_samples >= 1 and 0 < level < 1, got {num_samples} and {level}")
    num_m, num_p = values.shape
    if num_p == 0:
        nan = torch.full((num_m,), math.nan, dtype=torch.float64)
        return (nan[0], nan[0]) if squeeze else (nan, nan)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(num_p, (num_samples, num_p), generator=gen)  # (B, P)
    # Replicate means as (M, P) @ (P, b) products of problem counts, b replicates at a time: memory stays
    # O((M + P) b) instead of the O(M B P) of indexing values[:, idx] (54 metrics x 1000 x 500 at n = 256).
    ok = ~torch.isnan(values)  # (M, P)
    filled, okf = values.nan_to_num(0.0), ok.double()
    means = torch.empty(num_m, num_samples, dtype=torch.float64)  # (M, B)
    step = max(1, (1 << 22) // max(1, num_p))
    for s in range(0, num_samples, step):
        part = idx[s : s + step]  # (b, P)
        counts = torch.zeros(len(part), num_p, dtype=torch.float64).scatter_add_(
            1, part, torch.ones_like(part, dtype=torch.float64)).T  # (P, b)
        # NaN when a replicate drew only NaN problems of a metric (0 / 0), as nanmean
        means[:, s : s + step] = (filled @ counts) / (okf @ counts)
    low, high = percentile_interval(means.T, level, nan=True)  # (M,), (M,)
    return (low[0], high[0]) if squeeze else (low, high)


EXACT_SIGN_FLIPS = 16  # up to 2^16 sign patterns are enumerated; more nonzero differences are sampled
TIE_TOLERANCE = 1e-9  # relative to sum |d|: a pattern whose |sum| equals the observed one in exact arithmetic ties


def sign_flip_pvalue(diffs: torch.Tensor, num_samples: int = 10_000, seed: int = 0) -> tuple[torch.Tensor, list[bool]]:
    """Two-sided paired permutation (sign-flip) test of mean difference = 0, per metric.

    Under the null each problem's difference d_i is as likely to be -d_i (the two runs are exchangeable within a
    problem), so the p-value is P(|sum_i s_i d_i| >= |sum_i d_i|) over independent uniform signs s_i. Zero and NaN
    (left-out) differences change no sum, so a metric with m nonzero differences has 2^m equally likely sums:
    enumerated exactly when m <= `EXACT_SIGN_FLIPS`, else `num_samples` random sign vectors (seeded, shared by all
    metrics) give the Monte Carlo p-value (1 + #{as extreme}) / (1 + B), which is never 0 and is valid at any B.

    Args:
        diffs: `(M, P)` per-problem paired differences of M metrics (or `(P,)`); NaN = problem left out.

    Returns:
        (p-values `(M,)` (a scalar for 1-D input), per metric whether it was exact).
    """
    d = torch.as_tensor(diffs, dtype=torch.float64)
    squeeze = d.dim() == 1
    d = d[None] if squeeze else d
    if d.dim() != 2:
        raise ValueError(f"diffs must have shape (P,) or (M, P), got {tuple(d.shape)}")
    if not (isinstance(num_samples, int) and num_samples >= 1):
        raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    filled = d.nan_to_num(0.0)  # (M, P): a left-out problem adds 0 to every signed sum
    observed = filled.sum(1).abs()  # (M,)
    tol = TIE_TOLERANCE * filled.abs().sum(1)  # (M,) float rounding of equal sums in another order stays inside
    nonzero = filled != 0
    exact = [int(row.sum()) <= EXACT_SIGN_FLIPS for row in nonzero]
    p = torch.empty(len(d), dtype=torch.float64)
    if not all(exact):
        gen = torch.Generator().manual_seed(seed)
        signs = torch.randint(2, (num_samples, d.shape[1]), generator=gen, dtype=torch.float64) * 2 - 1  # (B, P)
        extreme = ((signs @ filled.T).abs() >= observed - tol).sum(0)  # (M,)
        p[:] = (1 + extreme) / (1 + num_samples)
    for j, small in enumerate(exact):
        if small:
            values = filled[j][nonzero[j]]  # (m,)
            m = len(values)
            bits = (torch.arange(2**m)[:, None] >> torch.arange(m)) & 1  # (2^m, m): every sign pattern once
            sums = ((bits * 2 - 1).double() @ values).abs()  # (2^m,)
            p[j] = (sums >= observed[j] - tol[j]).double().mean()
    return (p[0], exact[0]) if squeeze else (p, exact)


def percentile_interval(draws: torch.Tensor, level: float = 0.95, nan: bool = False) -> torch.Tensor:
    """`(B, ...)` bootstrap replicates -> `(2, ...)` [low, high] percentile interval (NaN replicates skipped if `nan`)."""
    alpha = (1 - level) / 2
    q = torch.tensor([alpha, 1 - alpha], dtype=draws.dtype)
    return (torch.nanquantile if nan else torch.quantile)(draws, q, dim=0)


# ---------------------------------------------------------------------------------- over seeds and problems
def resample_means(values: torch.Tensor, problem_idx: torch.Tensor, seed_idx: torch.Tensor) -> torch.Tensor:
    """Bootstrap replicates of the mean over seeds and problems, resampling both (a two-stage bootstrap).

    Args:
        values: `(S, P, M)` per-seed, per-problem values of M metrics.
        problem_idx: `(B, P)` resampled problem indices; share them between arms to pair over problems.
        seed_idx: `(B, S)` resampled seed indices; share them between arms to pair seed s with seed s.

    Returns:
        `(B, M)` replicate means.
    """
    # (B, S, P, M) would be large: average problems first within each seed, one replicate at a time
    by_seed = torch.stack([values[:, idx].mean(1) for idx in problem_idx])  # (B, S, M)
    picked = torch.gather(by_seed, 1, seed_idx[:, :, None].expand(-1, -1, values.shape[-1]))  # (B, S, M)
    return picked.mean(1)  # (B, M)


# ---------------------------------------------------------------------------------------------- over seeds
def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with an integer number of degrees of freedom (closed form, no special functions).

    With theta = atan(t / sqrt(df)), P(|T| < |t|) is a finite trigonometric series (Abramowitz & Stegun
    26.7.3-4): for odd df, (2/pi) (theta + sin(theta) sum_{j<(df-1)/2} a_j cos^(2j+1)(theta)) with
    a_0 = 1, a_j = a_{j-1} 2j / (2j + 1); for even df, sin(theta) sum_{j<df/2} b_j cos^(2j)(theta) with b_0 = 1,
    b_j = b_{j-1} (2j - 1) / (2j).
    """
    if not (isinstance(df, int) and df >= 1):
        raise ValueError(f"df must be a positive integer, got {df!r}")
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2:
        term, total = c, 0.0
        for j in range((df - 1) // 2):
            total += term
            term *= c * c * (2 * j + 2) / (2 * j + 3)
        # 1 - (2/pi) theta written as (2/pi) atan(sqrt(df) / |t|): no cancellation far in the tail
        outside = 2 / math.pi * (math.atan2(math.sqrt(df), abs(t)) - s * total)
    else:
        term, total = 1.0, 0.0
        for j in range(df // 2):
            total += term
            term *= c * c * (2 * j + 1) / (2 * j + 2)
        outside = 1 - s * total
    tail = outside / 2  # P(T > |t|)
    return 1 - tail if t >= 0 else tail


def t_ppf(p: float, df: int) -> float:
    """The p-quantile of Student's t (integer df): the t with `t_cdf(t, df) = p`, by bisection to machine precision."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if p < 0.5:
        return -t_ppf(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, 2 * high
    for _ in range(200):
        mid = (low + high) / 2
        if mid in (low, high):
            break
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def seed_t_test(diffs, level: float = 0.95) -> dict:
    """One-sample t test of mean = 0 on per-seed values (e.g. paired differences arm(s) - baseline(s)).

    Args:
        diffs: `(S,)` one value per seed, S >= 2.
        level: coverage of the t interval.

    Returns:
        {"mean", "sd" (sample SD), "n", "df", "ci": [low, high], "t", "p" (two-sided)}.
    """
    x = torch.as_tensor(diffs, dtype=torch.float64).flatten()
    if len(x) < 2 or not torch.isfinite(x).all():
        raise ValueError(f"need at least 2 finite per-seed values, got {x.tolist()}")
    n, mean, sd = len(x), x.mean().item(), x.std(unbiased=True).item()
    se = sd / math.sqrt(n)
    half = t_ppf(1 - (1 - level) / 2, n - 1) * se
    if se == 0:
        t, p = (0.0, 1.0) if mean == 0 else (math.copysign(math.inf, mean), 0.0)
    else:
        t = mean / se
        p = 2 * (1 - t_cdf(abs(t), n - 1))
    return {"mean": mean, "sd": sd, "n": n, "df": n - 1, "ci": [mean - half, mean + half], "t": t, "p": p}


def seed_tests(values, alpha: float = 0.05, level: float = 0.95) -> dict:
    """A family of seed-level tests: `seed_t_test` of each entry's per-seed values, Holm over the family.

    Args:
        values: {name: per-seed values (e.g. paired differences arm(s) - baseline(s)), at least 2 each}.
        alpha: family-wise error rate of Holm.

    Returns:
        {name: seed_t_test's keys, `p_holm`, and `ci_adjusted`: the t interval at level 1 - alpha/m (Bonferroni
        over the m entries; it excludes 0 only where Holm's first step rejects), `ci_adjusted_level`}.
    """
    tests = {name: seed_t_test(torch.tensor(v, dtype=torch.float64), level) for name, v in values.items()}
    adjusted = dict(zip(tests, holm([t["p"] for t in tests.values()])))
    adjusted_level = 1 - alpha / max(len(values), 1)
    return {name: {**t, "p_holm": adjusted[name], "ci_adjusted_level": adjusted_level,
                   "ci_adjusted": seed_t_test(torch.tensor(values[name], dtype=torch.float64), adjusted_level)["ci"]}
            for name, t in tests.items()}


def holm(pvalues) -> list[float]:
    """Holm-adjusted p-values (same order as given): hypothesis i is rejected at family-wise level a iff its
    adjusted p-value is <= a. Step-down: the j-th smallest p is multiplied by (m - j + 1), then made monotone."""
    p = [float(v) for v in pvalues]
    m = len(p)
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(sorted(range(m), key=p.__getitem__)):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def wilcoxon_exact(diffs) -> dict:
    """Two-sided Wilcoxon signed-rank test of a symmetric distribution about 0, exact, on per-seed differences.

    Zeros are dropped (Wilcoxon's rule); |d| equal to 12 significant digits tie and share their mean rank. Under
    the null each rank's sign is + or - with probability 1/2 independently, so W+ (the sum of the positive
    differences' ranks) has the distribution of a sum of independent {0, rank} terms, counted exactly over all
    2^m sign patterns (on doubled ranks, integers even with ties). p = P(|W+ - E W+| >= |w - E W+|). Integer
    dynamic programming, O(m^3): instant for per-seed differences (tens), seconds at a few hundred.

    Returns:
        {"p", "statistic" (W+), "n" (nonzero differences), "ties" (whether any |d| tied)}; p = 1 with no nonzero
        difference.
    """
    values = [float(x) for x in torch.as_tensor(diffs, dtype=torch.float64).flatten().tolist()]
    if not all(math.isfinite(x) for x in values):
        raise ValueError(f"wilcoxon_exact needs finite differences, got {values}")
    keys = [float(f"{abs(x):.12g}") for x in values if x != 0 and float(f"{abs(x):.12g}") != 0]
    signs = [x > 0 for x in values if x != 0 and float(f"{abs(x):.12g}") != 0]
    m = len(keys)
    if m == 0:
        return {"p": 1.0, "statistic": 0.0, "n": 0, "ties": False}
    order = sorted(range(m), key=keys.__getitem__)
    doubled = [0] * m  # 2 x the mean rank: an integer
    i = 0
    while i < m:
        j = i
        while j + 1 < m and keys[order[j + 1]] == keys[order[i]]:
            j += 1
        for t in range(i, j + 1):
            doubled[order[t]] = i + j + 2  # ranks i+1..j+1, mean (i + j + 2) / 2
        i = j + 1
    total = sum(doubled)
    counts = [1] + [0] * total  # counts[s]: sign patterns whose positive doubled ranks sum to s
    for r in doubled:
        counts = [counts[s] + (counts[s - r] if s >= r else 0) for s in range(total + 1)]
    w = sum(r for r, positive in zip(doubled, signs) if positive)
    extreme = sum(c for s, c in enumerate(counts) if abs(2 * s - total) >= abs(2 * w - total))
    return {"p": extreme / 2**m, "statistic": w / 2, "n": m, "ties": len(set(keys)) < m}


def detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The mean difference a two-sided one-sample t test at level `alpha` detects with about `power`, from n seeds
    with SD `sd`: (t_{1-alpha/2, n-1} + t_{power, n-1}) sd / sqrt(n) (the shifted-t approximation of the
    noncentral t, a little optimistic: at power 0.8 and alpha 0.05/3 the exact power is 0.763 at n = 5 and 0.788 at
    n = 10, from scipy's noncentral t in the tests)."""
    return (t_ppf(1 - alpha / 2, n - 1) + t_ppf(power, n - 1)) * sd / math.sqrt(n)
