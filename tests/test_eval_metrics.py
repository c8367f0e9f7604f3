"""eval/metrics.py against brute force: every metric by enumerating all k-subsets of a problem's samples.

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `eval` is a top-level folder

from eval import metrics  # noqa: E402
from eval.answers import extract_answer, normalize_answer  # noqa: E402

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
        if binary:
            assert torch.equal(metrics.pass_at_k(t, k).nan_to_num(-1), named["ReMax"].nan_to_num(-1))
            assert torch.equal(metrics.pass_hat_k(t, k).nan_to_num(-1), named["ReMin"].nan_to_num(-1))
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


def _maj_case(seed, num=30, n=6):
    rng = random.Random(seed)
    labels, correct = [], []
    for _ in range(num):
        classes = rng.randint(1, 4)
        lab = [rng.randrange(-1, classes) for _ in range(n)]
        good = rng.randrange(-1, classes)  # which class is the right answer (-1: none)
        cor = [float(lb == good and lb >= 0) for lb in lab]
        cor = [NAN if rng.random() < 0.1 else c for c in cor]
        labels.append(lab)
        correct.append(cor)
    return labels, correct


def test_maj_at_k_exact_matches_enumeration():
    labels, correct = _maj_case(0)
    lab_t, cor_t = torch.tensor(labels), torch.tensor(correct, dtype=torch.float64)
    for k in range(1, 7):
        got = metrics.maj_at_k(lab_t, cor_t, k).tolist()
        for lab, cor, g in zip(labels, correct, got):
            assert close(g, brute_maj(lab, cor, k), 1e-12), (k, lab, cor)


def test_maj_at_k_monte_carlo_is_seeded_and_close_to_exact():
    labels, correct = _maj_case(1, num=20, n=10)
    lab_t, cor_t = torch.tensor(labels), torch.tensor(correct, dtype=torch.float64)
    exact = metrics.maj_at_k(lab_t, cor_t, 5)
    mc = metrics.maj_at_k(lab_t, cor_t, 5, exact_limit=1, num_draws=20_000, seed=3)
    assert torch.equal(mc.nan_to_num(-1), metrics.maj_at_k(lab_t, cor_t, 5, exact_limit=1, num_draws=20_000,
                                                             seed=3).nan_to_num(-1))
    ok = ~torch.isnan(exact)
    # per problem the MC average of a [0, 1] variable over 20k draws: sd <= 0.0036
    assert (mc[ok] - exact[ok]).abs().max() < 0.02
    assert not torch.equal(mc[ok], exact[ok])  # it really was the Monte Carlo path


def test_maj_at_n_is_the_plain_vote_and_maj_at_1_is_pass_at_1():
    labels = torch.tensor([[0, 0, 1, 2], [1, 1, 0, 0], [-1, -1, -1, 3], [-1, -1, -1, -1]])
    correct = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]])
    assert metrics.maj_at_k(labels, correct, 4).tolist() == [1.0, 0.5, 1.0, 0.0]  # tie -> 1/2; abstainers skip
    assert metrics.maj_at_k(labels, correct, 1).tolist() == metrics.pass_at_k(correct, 1).tolist()


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
