"""`evaluation.compare_seeds`, the seed-level contrasts behind `compare --groups` and the studies' reports: values
from correct counts against exact fractions and subset enumeration, `--contrasts` families against scipy's t test
and Holm by hand, and each malformed contrast refused in one line naming the flag.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from helpers.compare_runs import scored_run
from helpers.eval_runs import cli_error
from helpers.oracle import brute_value

from ordergrad_trl import rank_weights
from ordergrad_trl.evaluation.compare import compare
from ordergrad_trl.evaluation.compare_seeds import count_matrix, count_value, parse_contrasts, seed_contrasts
from ordergrad_trl.evaluation.errors import UsageError

FAST = dict(bootstrap_samples=200, plot=False)


@pytest.mark.parametrize("n", [1, 5, 16])
def test_count_values_match_exact_fractions(n):
    rng = np.random.default_rng(n)
    counts = rng.integers(0, n + 1, 9).tolist()
    for k in range(1, n + 1):
        want_at = sum(1 - Fraction(math.comb(n - c, k), math.comb(n, k)) for c in counts) / len(counts)
        want_hat = sum(Fraction(math.comb(c, k), math.comb(n, k)) for c in counts) / len(counts)
        assert count_value(counts, n, f"pass@{k}") == pytest.approx(float(want_at), abs=1e-13)
        assert count_value(counts, n, f"pass^{k}") == pytest.approx(float(want_hat), abs=1e-13)
    matrix = count_matrix(counts, n)
    assert matrix.shape == (9, n) and matrix.sum(-1).tolist() == counts


def test_count_value_of_an_objective_matches_subset_enumeration():
    n, counts = 6, [0, 2, 3, 6, 5]
    w = rank_weights("TopM:2", 4).tolist()
    want = sum(brute_value([0.0] * (n - c) + [1.0] * c, w) for c in counts) / len(counts)
    assert count_value(counts, n, "TopM:2@4") == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("counts, n", [([3, 7], 6), ([-1], 4), ([1], 0)])
def test_bad_counts_are_refused(counts, n):
    with pytest.raises(ValueError, match=r"correct counts must lie in \[0, n\]"):
        count_matrix(counts, n)
    for fractional in ([2.5, 1.0], [float("nan")], [True, False]):  # never truncated to a count silently
        with pytest.raises(ValueError, match="whole numbers"):
            count_matrix(fractional, 4)
    assert count_matrix([2.0, 0.0], 4).sum().item() == 2.0  # a whole float is a count


def test_parse_contrasts_matches_whole_names():
    names = ["max-8", "max", "8"]
    got = parse_contrasts(["max-8-max:pass@8", "max-max-8:pass^2"], names)
    assert got == {"max-8-max:pass@8": ("max-8", "max", "pass@8"), "max-max-8:pass^2": ("max", "max-8", "pass^2")}
    with pytest.raises(UsageError, match="matches two ways"):
        parse_contrasts(["max-8-8:pass@1"], ["max-8", "max", "8-8", "8"])
    for text in ("a-b:pass@1", "max-max:pass@1", "max-8:", "max-8"):
        with pytest.raises(UsageError, match="--contrasts must be GROUP-MINUS:METRIC"):
            parse_contrasts([text], ["max", "8"])


def test_seed_contrasts_pair_by_seed_and_refuse_unequal_lengths():
    values = {"a": {"m": [0.5, 0.25, 1.0]}, "b": {"m": [0.25, 0.25, 0.5]}}
    t = seed_contrasts(values, {"a-b": ("a", "b", "m")})["a-b"]
    assert t["per_seed"] == [0.25, 0.0, 0.5] and t["mean"] == pytest.approx(0.25) and t["p_holm"] == t["p"]
    with pytest.raises(ValueError, match="seeds pair one to one"):
        seed_contrasts({"a": {"m": [1.0, 2.0]}, "b": {"m": [1.0]}}, {"x": ("a", "b", "m")})


def _groups(tmp_path, biases, seeds=3, problems=6, n=4):
    rng = np.random.default_rng(1)
    groups, correct = {}, {}
    for name, bias in biases.items():
        for s in range(seeds):
            c = {f"p{i}": (rng.random(n) < bias).astype(int).tolist() for i in range(problems)}
            groups.setdefault(name, []).append(scored_run(tmp_path / f"{name}{s}", c))
            correct.setdefault(name, []).append(c)
    return groups, correct


def test_contrasts_are_the_family_against_scipy_and_holm_by_hand(tmp_path):
    from scipy import stats as sst

    groups, correct = _groups(tmp_path, {"base": 0.3, "a": 0.6, "b": 0.45})
    contrasts = ["a-b:pass@4", "b-a:pass^2", "a-base:pass@1"]
    result = compare(groups=groups, output_dir=tmp_path / "cmp", ks=[1, 2, 4], contrasts=contrasts, **FAST)
    sl = result["seed_level"]
    assert sl["family_size"] == 3 and list(sl["contrasts"]) == contrasts and "groups" not in sl
    ps = {}
    for text in contrasts:
        g, m, key = parse_contrasts([text], list(groups))[text]
        k = int(key[-1])
        value = ((lambda cs: 1 - Fraction(math.comb(len(cs) - sum(cs), k), math.comb(len(cs), k))) if "@" in key
                 else (lambda cs: Fraction(math.comb(sum(cs), k), math.comb(len(cs), k))))  # fmt: skip
        per_seed = [float(sum(value(x[p]) - value(y[p]) for p in x) / len(x))
                    for x, y in zip(correct[g], correct[m])]  # fmt: skip
        e = sl["contrasts"][text]["datasets"]["toy"]
        assert e["per_seed"] == pytest.approx(per_seed, abs=1e-12)
        assert e["p_value"] == pytest.approx(sst.ttest_1samp(per_seed, 0.0).pvalue, rel=1e-9)
        ps[text] = e["p_value"]
    order = sorted(ps, key=ps.get)
    running, want = 0.0, {}
    for rank, text in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * ps[text]))
        want[text] = running
    for text in contrasts:
        assert sl["contrasts"][text]["datasets"]["toy"]["p_holm"] == pytest.approx(want[text], abs=1e-12)
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "## a-b:pass@4 on toy" in md and "each contrast's GROUP(s) - MINUS(s)" in md


def test_malformed_contrasts_are_refused_in_one_line(tmp_path, capsys):
    groups, _ = _groups(tmp_path, {"base": 0.3, "a": 0.6}, seeds=2, problems=3)
    flags = [f"{name}={','.join(map(str, runs))}" for name, runs in groups.items()]
    out = str(tmp_path / "cmp")
    err = cli_error(capsys, ["compare", "--groups", *flags, "--contrasts", "a-c:pass@1", "--output_dir", out])
    assert "--contrasts must be GROUP-MINUS:METRIC with groups among base, a; 'a-c:pass@1'" in err
    err = cli_error(capsys, ["compare", "--groups", *flags, "--contrasts", "a-base:pass@3", "--ks", "1", "4",
                             "--output_dir", out])
    assert "--contrasts a-base:pass@3: pass@3 is not a metric of this comparison" in err
    err = cli_error(capsys, ["compare", str(groups["base"][0]), str(groups["a"][0]), "--contrasts", "a-base:pass@1",
                             "--output_dir", out])
    assert "--contrasts needs --groups" in err
