"""evaluation/metrics.py against brute force: every metric by enumerating all k-subsets of a problem's samples.

The oracles below are written from the definitions (max, min, median, tail means, majority vote with fractional
tie-breaking over explicit subsets), not from rank weights, and pass@k / pass^k also against the closed forms
1 - C(n-c,k)/C(n,k) (Chen et al. 2021) and C(c,k)/C(n,k) in exact rational arithmetic.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from ordergrad_trl.evaluation import metrics
from ordergrad_trl.evaluation.answers import extract_answer, normalize_answer

NAN = math.nan


# ------------------------------------------------------------------------------------------------ oracles
def subsets_mean(values, k, stat):
    vals = [v for v in values if not math.isnan(v)]
    if len(vals) < k:
        return NAN
    subs = list(itertools.combinations(vals, k))
    return sum(stat(s) for s in subs) / len(subs)


def tail_mean(s, q, lower=True):
    m = math.ceil(round(q * len(s), 9))
    srt = sorted(s)
    part = srt[:m] if lower else srt[-m:]
    return sum(part) / m


ORACLES = {  # preset -> statistic of one subset
    "ReMax": max,
    "ReMin": min,
    "Mean": lambda s: sum(s) / len(s),
    "Median": statistics.median,
    "TopM:2": lambda s: sum(sorted(s)[-2:]) / 2 if len(s) >= 2 else None,
    "CVaR:0.25": lambda s: tail_mean(s, 0.25),
    "LowerTailMean:0.5": lambda s: tail_mean(s, 0.5),
    "Rank:2": lambda s: sorted(s)[-2] if len(s) >= 2 else None,
}


def brute_maj(labels, correct, k):
    """E over k-subsets of the majority vote's correctness; ties split evenly; abstainers (-1) don't vote."""
    pool = [(lab, c) for lab, c in zip(labels, correct) if not math.isnan(c)]
    if len(pool) < k:
        return NAN
    class_ok = {}
    for lab in {lab for lab, _ in pool if lab >= 0}:
        members = [c for lb, c in pool if lb == lab]
        class_ok[lab] = sum(members) / len(members)
    total = 0.0
    subs = list(itertools.combinations(pool, k))
    for sub in subs:
        votes = Counter(lab for lab, _ in sub if lab >= 0)
        if not votes:
            continue
        top = max(votes.values())
        tied = [lab for lab, v in votes.items() if v == top]
        total += sum(class_ok[lab] for lab in tied) / len(tied)
    return total / len(subs)


def random_rows(seed, num=40, n_max=7, binary=True, nan_frac=0.15):
    rng = random.Random(seed)
    rows = []
    n = n_max
    for _ in range(num):
        if binary:
            p = rng.random()
            row = [float(rng.random() < p) for _ in range(n)]
        else:
            row = [round(rng.uniform(-1, 2), 3) if rng.random() > 0.2 else rng.choice([0.0, 1.0]) for _ in range(n)]
        row = [NAN if rng.random() < nan_frac else x for x in row]
        rows.append(row)
    return rows


def close(a, b, tol=1e-12):
    if math.isnan(b):
        return math.isnan(a)
    return abs(a - b) <= tol


# ------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "shaped"])
def test_every_lstat_metric_matches_subset_enumeration(binary):
    rows = random_rows(1 if binary else 2, binary=binary)
    t = torch.tensor(rows, dtype=torch.float64)
    for k in range(1, 8):
        named = {
            "ReMax": metrics.best_of_k(t, k), "ReMin": metrics.worst_of_k(t, k),
            "CVaR:0.25": metrics.cvar_at_k(t, k, 0.25),
        }
        if binary:  # pass@k / pass^k: the subset max / min, and the closed forms in exact rationals
            for row, a, h in zip(rows, metrics.pass_at_k(t, k).tolist(), metrics.pass_hat_k(t, k).tolist()):
                assert close(a, subsets_mean(row, k, max)) and close(h, subsets_mean(row, k, min)), (k, row)
                vals = [x for x in row if not math.isnan(x)]
                if len(vals) >= k:
                    n, c = len(vals), int(sum(vals))
                    assert close(a, float(1 - Fraction(math.comb(n - c, k), math.comb(n, k))))
                    assert close(h, float(Fraction(math.comb(c, k), math.comb(n, k))))
        for preset, stat in ORACLES.items():
            if preset.startswith(("TopM", "Rank")) and k < 2:
                continue
            got = named.get(preset)
            got = metrics.lstat_metric(t, preset, k) if got is None else got
            for row, g in zip(rows, got.tolist()):
                want = subsets_mean(row, k, stat)
                assert close(g, want, 1e-9), (preset, k, row, g, want)


def test_pass_at_k_is_the_codex_estimator_and_pass_hat_k_its_mirror():
    for n in (1, 2, 5, 16, 40, 100):
        cs = sorted({0, 1, n // 3, n // 2, n - 1, n})
        t = torch.tensor([[1.0] * c + [0.0] * (n - c) for c in cs], dtype=torch.float64)
        t = t[:, torch.randperm(n, generator=torch.Generator().manual_seed(n))]  # order must not matter
        for k in sorted({k for k in (1, 2, n // 2, n) if 1 <= k <= n}):
            got_at, got_hat = metrics.pass_at_k(t, k).tolist(), metrics.pass_hat_k(t, k).tolist()
            for c, a, h in zip(cs, got_at, got_hat):
                codex = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
                hat = Fraction(math.comb(c, k), math.comb(n, k))
                assert abs(a - float(codex)) < 1e-12, (n, c, k)
                assert abs(h - float(hat)) < 1e-12, (n, c, k)


def test_pass_at_k_at_n_256_with_missing_samples_is_the_closed_form():
    gen = torch.Generator().manual_seed(4)
    t = (torch.rand(12, 256, generator=gen) < torch.rand(12, 1, generator=gen)).double()
    t[3:6, :5] = NAN  # rows with 251 and 250 valid samples
    t[6:9, 100:106] = NAN
    for k in (1, 8, 64, 128, 250, 256):
        got_at, got_hat = metrics.pass_at_k(t, k).tolist(), metrics.pass_hat_k(t, k).tolist()
        for row, a, h in zip(t.tolist(), got_at, got_hat):
            vals = [x for x in row if not math.isnan(x)]
            if len(vals) < k:
                assert math.isnan(a) and math.isnan(h)
                continue
            n, c = len(vals), int(sum(vals))
            assert abs(a - float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))) < 1e-12, (k, n, c)
            assert abs(h - float(Fraction(math.comb(c, k), math.comb(n, k)))) < 1e-12, (k, n, c)


def test_pass_at_k_unbiased_for_the_population_quantity():
    # E over draws of n samples of the estimate = 1 - (1-p)^k exactly: sum over c of Binomial(n, p) weights.
    n, k, p = 10, 3, Fraction(3, 10)
    cs = list(range(n + 1))
    t = torch.tensor([[1.0] * c + [0.0] * (n - c) for c in cs], dtype=torch.float64)
    est = metrics.pass_at_k(t, k).tolist()
    expect = sum(math.comb(n, c) * p**c * (1 - p) ** (n - c) * Fraction(e) for c, e in zip(cs, est))
    assert abs(float(expect) - float(1 - (1 - p) ** k)) < 1e-12


def test_missing_samples_are_dropped_and_short_rows_give_nan():
    t = torch.tensor([[1.0, NAN, 0.0, 1.0, NAN], [NAN, NAN, NAN, 1.0, 0.0]], dtype=torch.float64)
    short = torch.tensor([[1.0, 0.0, 1.0]], dtype=torch.float64)
    assert metrics.pass_at_k(t, 2)[0] == metrics.pass_at_k(short, 2)[0] == pytest.approx(1 - 0 / 3)
    assert math.isnan(metrics.pass_at_k(t, 3)[1])  # 2 valid < k
    assert metrics.problem_mean(metrics.pass_at_k(t, 3)) == (pytest.approx(1.0), 1)
    assert metrics.problem_mean(torch.tensor([NAN]))[1] == 0


def test_bad_k_and_shapes_raise():
    t = torch.zeros(2, 4)
    for k in (0, 5, 1.5, True):
        with pytest.raises(ValueError, match="k must be an integer"):
            metrics.pass_at_k(t, k)
    with pytest.raises(ValueError, match="shape"):
        metrics.pass_at_k(torch.zeros(4), 1)
    with pytest.raises(ValueError, match="labels"):
        metrics.maj_at_k(torch.zeros(2, 4), t, 2)  # float labels
    with pytest.raises(ValueError, match="Invalid objective"):
        metrics.lstat_metric(t, "TopM:9", 4)


def count_vector_maj(sizes, ok, abstain, k):
    """maj@k as a Fraction by enumerating vote-count vectors (x_1..x_C, abstainers) with multivariate
    hypergeometric weights prod C(m_c, x_c) C(a, k - sum x) / C(n, k): no subsets, no generating functions."""
    n = sum(sizes) + abstain
    total = Fraction(0)
    for xs in itertools.product(*[range(min(m, k) + 1) for m in sizes]):
        rest = k - sum(xs)
        if not 0 <= rest <= abstain or max(xs, default=0) == 0:
            continue
        ways = math.prod(math.comb(m, x) for m, x in zip(sizes, xs)) * math.comb(abstain, rest)
        winners = [c for c, x in enumerate(xs) if x == max(xs)]
        total += ways * sum(Fraction(ok[c]) for c in winners) / len(winners)
    return total / math.comb(n, k)


def pool_labels(sizes, abstain, seed=0):
    """Labels / correctness rows for a pool (class 0 correct), shuffled: sample order must not matter."""
    lab = [c for c, m in enumerate(sizes) for _ in range(m)] + [-1] * abstain
    random.Random(seed).shuffle(lab)
    return lab, [float(lb == 0) for lb in lab]


SPLITS = [  # (class sizes, abstainers): singletons, a dominant class, 2- and 3-way ties, only abstainers
    ((1,), 0), ((2, 2), 0), ((3, 1), 1), ((1, 1, 1), 2), ((2, 2, 2), 1), ((4, 3), 2), ((1, 5), 0), ((3, 3, 1), 2),
    ((1,) * 8, 1), ((2, 1, 1, 1), 3), ((5, 4), 1), ((10,), 0), ((1,) * 10, 0), ((2, 2, 2, 2, 2), 0), ((), 4),
]


@pytest.mark.parametrize("sizes,abstain", SPLITS, ids=lambda v: str(v))
def test_maj_at_k_matches_subset_enumeration_at_every_k(sizes, abstain):
    lab, cor = pool_labels(sizes, abstain, seed=len(sizes))
    n = len(lab)
    for k in range(1, n + 1):
        got = metrics.maj_at_k(torch.tensor([lab]), torch.tensor([cor], dtype=torch.float64), k)[0].item()
        assert close(got, brute_maj(lab, cor, k), 1e-13), (sizes, abstain, k)
        # the correct answer in any class (a minority, a tied one): the oracle with another class correct
        for good in range(len(sizes)):
            cor2 = [float(lb == good) for lb in lab]
            got = metrics.maj_at_k(torch.tensor([lab]), torch.tensor([cor2], dtype=torch.float64), k)[0].item()
            assert close(got, brute_maj(lab, cor2, k), 1e-13), (sizes, abstain, k, good)


def test_maj_at_k_random_pools_with_missing_samples_match_enumeration():
    rng = random.Random(0)
    labels, correct = [], []
    for _ in range(60):
        classes = rng.randint(1, 5)
        lab = [rng.randrange(-1, classes) for _ in range(10)]
        # class scores as the report builds them (a class is right or wrong), plus mixed classes (mean scores)
        good = rng.randrange(-1, classes)
        cor = [float(lb == good and lb >= 0) if rng.random() < 0.8 else float(rng.random() < 0.5) for lb in lab]
        labels.append(lab)
        correct.append([NAN if rng.random() < 0.1 else c for c in cor])
    lab_t, cor_t = torch.tensor(labels), torch.tensor(correct, dtype=torch.float64)
    for k in range(1, 11):
        for lab, cor, g in zip(labels, correct, metrics.maj_at_k(lab_t, cor_t, k).tolist()):
            assert close(g, brute_maj(lab, cor, k), 1e-13), (k, lab, cor)


@pytest.mark.parametrize("sizes,abstain,ks", [
    ((7, 7, 5, 3), 2, range(1, 25)),  # n = 24, every k, a 2-way tie at the top
    ((9, 2, 2, 2, 2, 2), 5, range(1, 25)),
    ((120, 100), 36, (1, 2, 3, 17, 64, 127, 128, 200, 255, 256)),  # n = 256
    ((90, 90, 60), 16, (1, 2, 5, 8)),
])
def test_maj_from_counts_exact_against_count_vectors(sizes, abstain, ks):
    oks = [[1] + [0] * (len(sizes) - 1), [0, 1] + [0] * (len(sizes) - 2), [Fraction(1, 3)] * len(sizes)]
    for k in ks:
        for ok in oks:
            want = count_vector_maj(sizes, ok, abstain, k)
            assert metrics.maj_from_counts(sizes, ok, abstain, k, exact=True) == want, (k, ok)
            got = metrics.maj_from_counts(sizes, [float(o) for o in ok], abstain, k)
            assert abs(got - float(want)) <= 1e-13 * max(1.0, float(want)), (k, ok, got, float(want))


def test_maj_at_k_float64_is_exact_to_1e12_at_n_256():
    rng = random.Random(5)
    for classes in (3, 40):
        lab = [rng.randrange(-1, classes) for _ in range(256)]
        sizes = [lab.count(c) for c in range(classes) if lab.count(c)]
        ok = [1.0] + [0.0] * (len(sizes) - 1)
        for k in (2, 64, 255):
            exact = metrics.maj_from_counts(sizes, [Fraction(o) for o in ok], lab.count(-1), k, exact=True)
            got = metrics.maj_from_counts(sizes, ok, lab.count(-1), k)
            assert abs(got - float(exact)) < 1e-12, (classes, k)


def monte_carlo_maj(lab, cor, k, draws, rng):
    """Mean and standard error of the vote's score over random k-subsets (ties broken by a random draw)."""
    scores = []
    for _ in range(draws):
        sub = rng.sample(range(len(lab)), k)
        votes = Counter(lab[i] for i in sub if lab[i] >= 0)
        if not votes:
            scores.append(0.0)
            continue
        top = max(votes.values())
        winner = rng.choice(sorted(c for c, v in votes.items() if v == top))
        scores.append(next(cor[i] for i in range(len(lab)) if lab[i] == winner))
    mean = sum(scores) / draws
    return mean, math.sqrt(max(mean * (1 - mean), 1e-12) / draws)


@pytest.mark.parametrize("sizes,abstain,k", [
    ((20, 18, 10, 6, 4), 6, 16),  # n = 64, close race between the top two
    ((8,) * 8, 0, 32),  # eight-way ties
    ((3,) * 20, 4, 24),
    ((1,) * 64, 0, 40),  # 64 distinct answers: a uniform winner, 1/64
])
def test_maj_at_k_against_monte_carlo_at_n_64(sizes, abstain, k):
    lab, cor = pool_labels(sizes, abstain, seed=k)
    got = metrics.maj_at_k(torch.tensor([lab]), torch.tensor([cor], dtype=torch.float64), k)[0].item()
    mean, se = monte_carlo_maj(lab, cor, k, 20_000, random.Random(k))
    assert abs(got - mean) < 4.5 * se + 1e-9, (got, mean, se)


def test_maj_at_n_is_the_plain_vote_and_maj_at_1_is_pass_at_1():
    labels = torch.tensor([[0, 0, 1, 2], [1, 1, 0, 0], [-1, -1, -1, 3], [-1, -1, -1, -1]])
    correct = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]])
    assert metrics.maj_at_k(labels, correct, 4).tolist() == [1.0, 0.5, 1.0, 0.0]  # tie -> 1/2; abstainers skip
    assert metrics.maj_at_k(labels, correct, 1).tolist() == [0.5, 0.5, 0.25, 0.0]  # pass@1: c / n


def test_maj_from_counts_bad_input():
    with pytest.raises(ValueError, match="k must be"):
        metrics.maj_from_counts([2, 1], [1.0, 0.0], 0, 4)
    with pytest.raises(ValueError, match="one ok per class"):
        metrics.maj_from_counts([2, 0], [1.0, 0.0], 0, 1)


def test_bootstrap_ci():
    gen = torch.Generator().manual_seed(0)
    p, num = 0.3, 2000
    values = (torch.rand(num, generator=gen) < p).double()
    low, high = metrics.bootstrap_ci(values, 2000, seed=1)
    mean, sd = values.mean().item(), values.std().item() / math.sqrt(num)
    assert low < mean < high
    assert (high - low) == pytest.approx(2 * 1.959964 * sd, rel=0.1)  # the normal approximation at this size
    again = metrics.bootstrap_ci(values, 2000, seed=1)
    assert (again[0], again[1]) == (low, high)
    # one shared resample for several metrics; a constant metric has a zero-width interval; NaN problems skipped
    stacked = torch.stack([values, torch.full((num,), 0.25, dtype=torch.float64), values.masked_fill(values == 0,
                                                                                                      NAN)])
    lo, hi = metrics.bootstrap_ci(stacked, 500, seed=1)
    assert lo[1] == hi[1] == 0.25 and lo[2] == hi[2] == 1.0
    low80, high80 = metrics.bootstrap_ci(values, 2000, level=0.8, seed=1)
    assert low < low80 < high80 < high
    with pytest.raises(ValueError, match="num_samples"):
        metrics.bootstrap_ci(values, 0)


def test_bootstrap_ci_equals_explicit_resampling():
    """Against the textbook loop: resample problem indices, nanmean each metric, percentile interval."""
    gen = torch.Generator().manual_seed(2)
    values = torch.rand(3, 37, generator=gen, dtype=torch.float64)
    values[1, ::4] = NAN
    values[2, :36] = NAN  # a metric with one valid problem: replicates without it are NaN and left out
    low, high = metrics.bootstrap_ci(values, 300, level=0.9, seed=7)
    idx = torch.randint(37, (300, 37), generator=torch.Generator().manual_seed(7))
    for m in range(3):
        means = [statistics.fmean([x for x in values[m, row].tolist() if not math.isnan(x)] or [NAN]) for row in idx]
        means = sorted(x for x in means if not math.isnan(x))
        q = torch.quantile(torch.tensor(means, dtype=torch.float64), torch.tensor([0.05, 0.95], dtype=torch.float64))
        assert low[m].item() == pytest.approx(q[0].item(), abs=1e-12)
        assert high[m].item() == pytest.approx(q[1].item(), abs=1e-12)


@pytest.mark.parametrize(
    "text,want",
    [
        (r"so \boxed{\dfrac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{1,450,000}", "1450000"),
        (r"\boxed{27.0}", "27"),
        (r"\boxed{ 3 } then \boxed{\text{(B)}}", "(B)"),
        ("The answer is 42.", "42"),
        ("It costs $1,200.50 in total", "1200.5"),
        ("no digits here", None),
        (r"\boxed{90^\circ}", "90"),
    ],
)
def test_extract_answer(text, want):
    assert extract_answer(text) == want


def test_normalize_keeps_distinct_answers_distinct():
    assert normalize_answer("1,2") != normalize_answer("12")  # a list is not a thousands separator
    assert normalize_answer("-0.50") == "-0.5" and normalize_answer("x = 3") == "x=3"
