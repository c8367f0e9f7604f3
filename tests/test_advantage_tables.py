"""lstat_advantage at large N: coefficient tables vs exact rationals and the previous implementation, their cache,
and the sort-free 0/1 path."""

import math
from fractions import Fraction

import pytest
import torch
from helpers.oracle import brute_advantage, brute_value
from test_advantage import PRESETS

from ordergrad_trl import lstat_advantage, lstat_value, rank_weights
from ordergrad_trl.core import advantage as adv_module


def legacy_coefficients(n, weights):
    """The pure-Python tables this package used before (each exact integer ratio rounded once): rows c and
    N/(N-K) h, h at index t-1. The reference for "today's values"."""
    k, comb = len(weights), math.comb
    c, h = [0.0] * n, [0.0] * n
    for m in range(1, n + 1):
        for j in range(1, k + 1):
            c[m - 1] += weights[j - 1] * (comb(m - 1, j - 1) * comb(n - m, k - j) / comb(n, k))
            if m < n:
                h[m - 1] += weights[j - 1] * (comb(m - 1, j - 1) * comb(n - m - 1, k - j) / comb(n - 1, k - 1))
    return c, [x * (n / (n - k) if n > k else 0.0) for x in h]


def exact_coefficients(n, weights, ms):
    """Exact rationals (value weight c_m, scaled gap weight N/(N-K) h_m, and the sum of |terms| of each) at ms."""
    k, comb = len(weights), math.comb
    w = {j: Fraction(x) for j, x in enumerate(weights, start=1) if x}
    out = []
    for m in ms:  # integer sums first, one division each: big-integer Fractions are slow
        tc = [(wj, comb(m - 1, j - 1) * comb(n - m, k - j)) for j, wj in w.items()]
        th = [(wj, comb(m - 1, j - 1) * comb(n - m - 1, k - j)) for j, wj in w.items()] if m < n else []
        dc, dh = comb(n, k), Fraction(comb(n - 1, k - 1) * (n - k), n)
        out.append((
            sum(wj * t for wj, t in tc) / dc, sum(abs(wj) * t for wj, t in tc) / dc,
            sum((wj * t for wj, t in th), Fraction(0)) / dh, sum((abs(wj) * t for wj, t in th), Fraction(0)) / dh,
        ))
    return out


def assert_table_exact(n, weights, ms, rtol):
    """Each table entry within rtol of the exact rational, relative to the sum of its terms' magnitudes (the
    entry itself for nonnegative weights; mixed signs can cancel, and no float64 sum does better than that)."""
    table = adv_module._coefficients(n, tuple(weights))
    assert table.dtype == torch.float64 and table.shape == (3, n + 1) and torch.isfinite(table).all()
    for m, (c, c_abs, h, h_abs) in zip(ms, exact_coefficients(n, weights, ms)):
        assert abs(Fraction(table[0, m - 1].item()) - c) <= rtol * c_abs, ("c", n, m)
        if m < n:
            assert abs(Fraction(table[1, m].item()) - h) <= rtol * h_abs, ("h", n, m)


def valid_for(objective, k):
    try:
        return rank_weights(objective, k).tolist()
    except ValueError:  # e.g. Rank:2 or GMD at K=1
        return None


@pytest.mark.parametrize("objective", PRESETS)
@pytest.mark.parametrize("n,k", [(5, 4), (17, 1), (33, 8), (64, 4), (64, 32), (64, 63)])
def test_tables_match_exact_fractions(objective, n, k):
    w = valid_for(objective, k) or pytest.skip(f"{objective} is not defined for K={k}")
    assert_table_exact(n, w, range(1, n + 1), rtol=1e-13)


@pytest.mark.parametrize("objective", ["TopM:2", "GMD", "CVaR:0.25", "HarrellDavis:0.5", "Rank:3"])
@pytest.mark.parametrize("n,k", [(48, 24), (80, 6), (96, 90)])
def test_tables_match_the_previous_implementation(objective, n, k):
    w = rank_weights(objective, k).tolist()
    table = adv_module._coefficients(n, tuple(w))
    c, h = (torch.tensor(x, dtype=torch.float64) for x in legacy_coefficients(n, w))
    scale = max(abs(x) for x in w)  # mixed-sign weights can cancel an entry to ~0: relative to the weights there
    for got, want in ((table[0, :n], c), (table[1, 1:n], h[: n - 1])):
        err = (got - want).abs() / torch.maximum(want.abs(), torch.full_like(want, 1e-300))
        ok = (err <= 1e-12) | ((got - want).abs() <= 1e-15 * scale * want.abs().max())
        assert ok.all(), (objective, n, k, err.max())


@pytest.mark.parametrize("objective", ["ReMax", "ReMin", "Median", "TopM:2", "Mean", "GMD"])
def test_tables_at_n_1024_k_512_no_overflow_or_cancellation(objective):
    """C(1024, 512) ~ 4.5e306: the entries span 300 decades; sampled ones (extremes included) match exact rationals."""
    n, k = 1024, 512
    w = rank_weights(objective, k).tolist()
    ms = [1, 2, 3, 100, 400, 511, 512, 513, 600, 1000, 1022, 1023, 1024]
    assert_table_exact(n, w, ms, rtol=1e-12)
    table = adv_module._coefficients(n, tuple(w))
    # each order statistic's position distribution sums to 1: sum_m c_m = sum_j w_j, and likewise for N-1 and h
    assert table[0].sum().item() == pytest.approx(sum(w), rel=1e-13, abs=1e-13)
    assert table[1].sum().item() == pytest.approx(n / k * sum(w), rel=1e-13, abs=1e-13)


@pytest.mark.parametrize("n,k", [(256, 128), (1024, 512)])
def test_pass_at_k_advantage_at_user_sizes(n, k):
    """0/1 rewards with c successes, ReMax: value = pass@k = 1 - C(n-c, k)/C(n, k), and by a_i = (N/K)(v - v^-i)
    a success gets (N/K)(pass@k - pass@k of the others); exact rationals."""
    w = rank_weights("ReMax", k)
    cs = [0, 1, 2, 5, n // 4, n // 2, n - k - 1, n - k, n - k + 1, n - 1, n]
    rows = torch.tensor([[1.0] * c + [0.0] * (n - c) for c in cs], dtype=torch.float64)
    values, adv = lstat_value(rows, w), lstat_advantage(rows, w)
    adv_sorted = lstat_advantage(torch.cat([rows, torch.full((1, n), 0.5, dtype=torch.float64)]), w)[:-1]
    assert torch.equal(adv, adv_sorted)  # the sort-free 0/1 path is bit-identical to the sorting path
    for row, c in enumerate(cs):
        pass_k = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
        assert values[row].item() == pytest.approx(float(pass_k), rel=1e-13, abs=1e-300)
        for x, others_c in ((1.0, c - 1), (0.0, c)):
            if (x == 1.0 and c == 0) or (x == 0.0 and c == n):
                continue
            others = 1 - Fraction(math.comb(n - 1 - others_c, k), math.comb(n - 1, k))
            expected = float(Fraction(n, k) * (pass_k - others))
            got = adv[row, 0 if x == 1.0 else -1].item()
            assert got == pytest.approx(expected, rel=1e-12, abs=1e-15), (c, x)


def exact_leave_one_out(rewards, weights, idx):
    """a_i = (N/K) (v - v^-i) in exact rationals, v from the closed-form value weights (distinct rewards):
    E[L] = (K/N) q_i + (1 - K/N) v^-i gives q_i - v^-i = (N/K)(v - v^-i)."""
    n, k = len(rewards), len(weights)
    w = [Fraction(x) for x in weights]
    nz = [j for j in range(1, k + 1) if w[j - 1]]

    def value(xs):
        m_count, total = len(xs), Fraction(0)
        denom = math.comb(m_count, k)
        for m, x in enumerate(sorted(xs), start=1):
            coef = sum(w[j - 1] * math.comb(m - 1, j - 1) * math.comb(m_count - m, k - j) for j in nz)
            total += Fraction(x) * coef / denom
        return total

    v = value(rewards)
    return [Fraction(n, k) * (v - value(rewards[:i] + rewards[i + 1 :])) for i in idx]


@pytest.mark.parametrize("objective", ["TopM:2", "LowerTailMean:0.1"])
def test_continuous_advantage_at_n_256_k_128_matches_exact_rationals(objective):
    n, k = 256, 128
    w = rank_weights(objective, k)
    r = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    idx = [int(i) for i in r.argsort()[[0, 1, 60, 127, 128, 200, 254, 255]]]
    expected = exact_leave_one_out(r.tolist(), w.tolist(), idx)
    got = lstat_advantage(r, w)
    scale = r.abs().max().item() * n / k
    for i, e in zip(idx, expected):
        assert abs(Fraction(got[i].item()) - e) <= 1e-12 * scale, i
    assert torch.equal(lstat_advantage(r.float(), w).double(), got.float().double()) or torch.allclose(
        lstat_advantage(r.float(), w).double(), got, atol=1e-4 * scale
    )


def test_tables_are_built_only_for_the_counts_that_occur():
    """NaN (unscorable) rewards at N=128: one table per valid count present, each reused, none for other counts."""
    w = rank_weights("TopM:2", 8)
    r = torch.rand(6, 128, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    r[0, :3] = r[1, 5:8] = math.nan  # two groups with 125 valid
    r[2, :120] = math.nan  # 8 valid = K: no advantage, value only
    r[3, :] = math.nan
    adv_module._coefficients.cache_clear()
    adv_module._padded.cache_clear()
    a = lstat_advantage(r, w)
    built = adv_module._coefficients.cache_info()
    assert built.currsize == 3  # counts 128, 125 and 8; the 120 others were never built
    lstat_value(r, w)
    assert adv_module._coefficients.cache_info().misses == built.misses  # reused across calls and functions
    for row in range(4):  # each group equals itself ranked alone (its own count), NaN entries 0
        keep = ~torch.isnan(r[row])
        if keep.sum() > 8:
            assert torch.allclose(a[row, keep], lstat_advantage(r[row, keep], w), rtol=0, atol=1e-15)
        assert (a[row, ~keep] == 0).all()
    assert (a[2] == 0).all() and (a[3] == 0).all()


def test_cached_tables_keep_objectives_and_sizes_apart():
    """Alternating objectives, sizes and NaN counts against brute-force enumeration: a cache keyed too coarsely
    (e.g. by N alone, or by K) would hand one of them another's table."""
    g = torch.Generator().manual_seed(3)
    for objective, n in [("TopM:2", 7), ("BotM:2", 7), ("TopM:2", 8), ("GMD", 7), ("TopM:2", 7), ("BotM:2", 8)]:
        w = rank_weights(objective, 4)
        r = torch.randn(2, n, dtype=torch.float64, generator=g)
        r[1, 0] = math.nan
        for row in range(2):
            keep = ~torch.isnan(r[row])
            expected = torch.tensor(brute_advantage(r[row, keep].tolist(), w.tolist()), dtype=torch.float64)
            assert torch.allclose(lstat_advantage(r, w)[row, keep], expected, atol=1e-12), (objective, n, row)
            assert lstat_value(r, w)[row].item() == pytest.approx(brute_value(r[row, keep].tolist(), w.tolist()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_binary_path_is_bit_identical_to_the_sorting_path(dtype):
    g = torch.Generator().manual_seed(5)
    binary = (torch.rand(300, 16, generator=g) < 0.3).to(dtype)
    binary[0], binary[1] = 0.0, 1.0  # constant groups
    mixed = torch.cat([binary, torch.full((1, 16), 0.5, dtype=dtype)])  # one non-0/1 group: the sorting path
    for objective in ("TopM:2", "GMD", "CVaR:0.5", "ReMax"):
        w = rank_weights(objective, 4)
        fast = lstat_advantage(binary, w)
        assert torch.equal(fast, lstat_advantage(mixed, w)[:-1])
        assert (fast[:2] == 0).all()
    assert lstat_advantage(binary.long(), w).dtype == torch.float64
