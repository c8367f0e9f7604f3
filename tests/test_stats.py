"""`ordergrad_trl.core.stats` against independent calculations: scipy's t distribution, t test and noncentral t,
Holm's step-down rule applied by definition, direct resampling loops for the bootstraps, and scipy's exact
Wilcoxon (no ties) or enumeration of every sign pattern (ties, zeros) for the signed-rank test."""

import itertools
import math
import random

import numpy as np
import pytest
import torch

from ordergrad_trl.core.stats import (
    bootstrap_ci,
    detectable_effect,
    holm,
    percentile_interval,
    resample_means,
    seed_t_test,
    t_cdf,
    t_ppf,
    wilcoxon_exact,
)

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (the dev extra) is the independent oracle here")


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 10, 29, 30, 101])
def test_t_cdf_and_ppf_match_scipy(df):
    for t in [-40.0, -6.5, -2.262, -1.0, -1e-3, 0.0, 0.3, 1.833, 2.5, 7.0, 55.0]:
        assert t_cdf(t, df) == pytest.approx(scipy_stats.t.cdf(t, df), abs=1e-13, rel=1e-11)
    for p in [1e-6, 0.0083, 0.025, 0.2, 0.5, 0.8, 0.975, 0.99167, 1 - 1e-6]:
        assert t_ppf(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-9, abs=1e-12)


def test_t_bad_inputs():
    with pytest.raises(ValueError, match="df"):
        t_cdf(1.0, 0)
    with pytest.raises(ValueError, match="df"):
        t_cdf(1.0, 2.5)
    with pytest.raises(ValueError, match="p must be"):
        t_ppf(1.0, 3)
    assert t_cdf(math.inf, 3) == 1.0 and t_cdf(-math.inf, 3) == 0.0


@pytest.mark.parametrize("n", [2, 3, 10])
def test_seed_t_test_matches_scipy(n):
    gen = torch.Generator().manual_seed(n)
    for shift in (0.0, 0.02, -0.1):
        x = (torch.randn(n, generator=gen, dtype=torch.float64) * 0.05 + shift).tolist()
        ours = seed_t_test(x)
        ref = scipy_stats.ttest_1samp(x, 0.0)
        ci = ref.confidence_interval(0.95)
        assert ours["p"] == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-14)
        assert ours["t"] == pytest.approx(ref.statistic, rel=1e-12)
        assert ours["ci"] == pytest.approx([ci.low, ci.high], rel=1e-10)
        assert ours["df"] == n - 1 and ours["mean"] == pytest.approx(sum(x) / n, rel=1e-12)


def test_seed_t_test_rejects_too_few_or_nonfinite():
    with pytest.raises(ValueError, match="at least 2"):
        seed_t_test([0.1])
    with pytest.raises(ValueError, match="finite"):
        seed_t_test([0.1, math.nan, 0.2])
    assert seed_t_test([0.0, 0.0])["p"] == 1.0


def _holm_rejects(p, alpha):
    """Holm's step-down rule as defined: walk the sorted p-values, reject while p_(j) <= alpha / (m - j + 1)."""
    order = sorted(range(len(p)), key=p.__getitem__)
    rejected = set()
    for j, i in enumerate(order):
        if p[i] > alpha / (len(p) - j):
            break
        rejected.add(i)
    return rejected


def test_holm_adjusted_p_equals_the_step_down_rule():
    rng = random.Random(0)
    for _ in range(200):
        m = rng.randint(1, 6)
        p = [rng.choice([rng.random() * 0.1, rng.random(), 0.01]) for _ in range(m)]
        adj = holm(p)
        assert all(a >= q for a, q in zip(adj, p)) and max(adj) <= 1.0
        for alpha in [0.001, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5]:
            assert {i for i, a in enumerate(adj) if a <= alpha} == _holm_rejects(p, alpha)


@pytest.mark.parametrize("n", [5, 10, 20])
def test_detectable_effect_has_about_the_stated_power(n):
    """Exact power of the two-sided t test at the detectable effect, from scipy's noncentral t."""
    alpha, sd = 0.05 / 3, 0.07
    effect = detectable_effect(sd, n, alpha=alpha, power=0.8)
    crit = scipy_stats.t.ppf(1 - alpha / 2, n - 1)
    nc = effect / (sd / math.sqrt(n))
    power = scipy_stats.nct.sf(crit, n - 1, nc) + scipy_stats.nct.cdf(-crit, n - 1, nc)
    assert 0.75 < power < 0.80  # the shifted t is a little optimistic: 0.763 at n = 5, 0.788 at n = 10


def test_bootstrap_ci_equals_a_direct_resampling_loop():
    gen = torch.Generator().manual_seed(1)
    values = torch.rand(3, 40, generator=gen, dtype=torch.float64)  # (M, P)
    values[1, 5] = math.nan
    low, high = bootstrap_ci(values, num_samples=300, seed=7)
    idx = torch.randint(40, (300, 40), generator=torch.Generator().manual_seed(7))  # the same draws
    means = torch.stack([values[:, row].nanmean(1) for row in idx])  # (B, M)
    q = torch.tensor([0.025, 0.975], dtype=torch.float64)
    ref = torch.nanquantile(means, q, dim=0)  # (2, M)
    torch.testing.assert_close(torch.stack([low, high]), ref, rtol=1e-12, atol=1e-12)
    assert percentile_interval(means).shape == (2, 3)


def test_resample_means_equals_a_direct_loop():
    gen = torch.Generator().manual_seed(2)
    values = torch.rand(4, 30, 2, generator=gen, dtype=torch.float64)  # (S, P, M)
    problem_idx = torch.randint(30, (50, 30), generator=gen)  # (B, P)
    seed_idx = torch.randint(4, (50, 4), generator=gen)  # (B, S)
    ours = resample_means(values, problem_idx, seed_idx)  # (B, M)
    for b in range(50):
        ref = torch.stack([values[s][problem_idx[b]].mean(0) for s in seed_idx[b].tolist()]).mean(0)  # (M,)
        torch.testing.assert_close(ours[b], ref, rtol=1e-12, atol=1e-12)


def _brute_wilcoxon(d):
    """P(|W+ - E| >= |w - E|) over every sign pattern of the nonzero |d|, midranks by sorting with ties."""
    nz = [x for x in d if x != 0]
    a = sorted(abs(x) for x in nz)
    rank = {v: (a.index(v) + 1 + len(a) - a[::-1].index(v)) / 2 for v in a}  # mean of the tied positions
    ranks = [rank[abs(x)] for x in nz]
    w = sum(r for r, x in zip(ranks, nz) if x > 0)
    centre = sum(ranks) / 2
    patterns = list(itertools.product((0, 1), repeat=len(nz)))
    hits = sum(abs(sum(r for r, b in zip(ranks, bits) if b) - centre) >= abs(w - centre) - 1e-12 for bits in patterns)
    return hits / len(patterns), w


@pytest.mark.parametrize("seed", range(4))
def test_wilcoxon_exact_matches_scipy_without_ties(seed):
    from scipy import stats as sst

    rng = np.random.default_rng(seed)
    d = rng.normal(0.3 * seed, 1.0, 9 + 7 * seed)  # no ties, no zeros (continuous draws), n up to 30
    got = wilcoxon_exact(d)
    want = sst.wilcoxon(d, method="exact")
    assert got["p"] == pytest.approx(want.pvalue, rel=1e-12) and got["n"] == len(d) and not got["ties"]
    assert min(got["statistic"], len(d) * (len(d) + 1) / 2 - got["statistic"]) == pytest.approx(want.statistic)


@pytest.mark.parametrize("d", [[0.5, -0.5, 0.25, 0.25, 0.0, 1.0, -0.25, 0.5], [1, 1, 1, -1], [0.1, 0.2, 0.3],
                               [0.0, 0.0], [2.0, -2.0, 2.0, 2.0, 2.0, 2.0, 3.0, -1.0, 0.5, 0.5, 0.5]])
def test_wilcoxon_exact_with_ties_and_zeros_matches_enumeration(d):
    got = wilcoxon_exact(d)
    if all(x == 0 for x in d):
        assert got == {"p": 1.0, "statistic": 0.0, "n": 0, "ties": False}
        return
    p, w = _brute_wilcoxon(d)
    assert got["p"] == pytest.approx(p, abs=1e-15) and got["statistic"] == pytest.approx(w)
    assert got["n"] == sum(x != 0 for x in d)


def test_wilcoxon_exact_ties_values_equal_to_printed_precision():
    """0.1 + 0.2 and 0.3 differ in the last bit: the same difference of two means, so one rank."""
    assert wilcoxon_exact([0.1 + 0.2, -0.3, 0.5])["ties"]
    with pytest.raises(ValueError, match="finite"):
        wilcoxon_exact([1.0, float("nan")])
