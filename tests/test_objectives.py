"""Each preset's weights, applied to a sorted sample, equal the statistic computed from its textbook definition."""

import itertools
import math
import statistics

import mpmath
import numpy as np
import pytest
import torch

from ordergrad_trl import rank_weights

RNG = np.random.default_rng(0)


def apply(objective, x):
    w = rank_weights(objective, len(x))
    return float(np.dot(w.numpy(), np.sort(x)))


def hosking_lmoment(x, r):
    """Sample L-moment as Hosking's U-statistic: average over r-subsets of r^-1 sum_k (-1)^k C(r-1,k) X_(r-k:r)."""
    total, count = 0.0, 0
    for s in itertools.combinations(sorted(x), r):
        total += sum((-1) ** k * math.comb(r - 1, k) * s[r - 1 - k] for k in range(r)) / r
        count += 1
    return total / count


def beta_cdf(x, a, b):
    """Regularized incomplete beta by quadrature; u = t^a (and the mirror image above 1/2) removes endpoint poles."""
    if x > 0.5:
        return 1 - beta_cdf(1 - x, b, a)
    integral = mpmath.quad(lambda u: (1 - u ** (1 / a)) ** (b - 1), [0, x**a]) / a
    return float(integral / mpmath.beta(a, b))


def harrell_davis(x, q):
    """Harrell-Davis: sum_j x_(j) P((j-1)/n < B <= j/n), B ~ Beta((n+1)q, (n+1)(1-q))."""
    n = len(x)
    a, b = (n + 1) * q, (n + 1) * (1 - q)
    return sum((beta_cdf(j / n, a, b) - beta_cdf((j - 1) / n, a, b)) * xj for j, xj in enumerate(sorted(x), 1))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7, 8])
def test_presets_match_definitions(k):
    x = RNG.normal(size=k)
    s = np.sort(x)
    checks = {
        "Mean": x.mean(),
        "Max": x.max(),
        "ReMax": x.max(),
        "Min": x.min(),
        "remin": x.min(),
        "Median": statistics.median(x),
        "Quantile:0.3": np.quantile(x, 0.3, method="hazen"),
        "Quantile:0": np.quantile(x, 0.0, method="hazen"),
        "Quantile:1": np.quantile(x, 1.0, method="hazen"),
        "LMoment:1": x.mean(),
    }
    for r in range(1, k + 1):
        checks[f"Rank:{r}"] = s[-r]
        checks[f"TopM:{r}"] = s[-r:].mean()
        checks[f"BotM:{r}"] = s[:r].mean()
    for m in range(0, (k + 1) // 2):
        checks[f"TrimM:{m}"] = s[m : k - m].mean()
        checks[f"WinsorizedM:{m}"] = np.clip(x, s[m], s[k - 1 - m]).mean()
    for q in (0.25, 0.5, 1.0):
        m = math.ceil(q * k)
        checks[f"LowerTailMean:{q}"] = s[:m].mean()
        checks[f"CVaR:{q}"] = s[:m].mean()
        checks[f"UpperTailMean:{q}"] = s[-m:].mean()
    if k >= 2:
        checks["GMD"] = np.abs(x[:, None] - x[None, :]).sum() / (k * (k - 1))
        for r in range(2, min(k, 4) + 1):
            checks[f"LMoment:{r}"] = hosking_lmoment(x, r)
        for q in (0.1, 0.5, 0.9):
            checks[f"HarrellDavis:{q}"] = harrell_davis(x, q)
    for objective, expected in checks.items():
        assert apply(objective, x) == pytest.approx(expected, abs=1e-12), objective


def test_lmoment_2_is_half_gmd_and_weights_sum():
    for k in (3, 5, 9):
        assert torch.allclose(rank_weights("LMoment:2", k), rank_weights("GMD", k) / 2, atol=1e-15)
        assert rank_weights("LMoment:3", k).sum().abs() < 1e-12  # higher L-moments ignore location
    assert rank_weights("HarrellDavis:0.5", 6).sum().item() == pytest.approx(1.0, abs=1e-14)


def test_tail_count_is_not_fooled_by_float_rounding():
    # 0.3 * 10 = 3.0000000000000004 in floating point: still the bottom 3 of 10
    assert (rank_weights("CVaR:0.3", 10) > 0).sum() == 3


def test_numbers_and_case():
    assert rank_weights("0, 0.5,0.5", 3).tolist() == [0.0, 0.5, 0.5]
    assert rank_weights([1, 2], 2).dtype == torch.float64
    assert rank_weights(" topm:2 ", 4).tolist() == rank_weights("TopM:2", 4).tolist()
    assert rank_weights("1", 1).tolist() == [1.0]


@pytest.mark.parametrize(
    "objective,k",
    [
        ("Nope", 4),
        ("TopM", 4),
        ("TopM:0", 4),
        ("TopM:5", 4),
        ("TopM:1.5", 4),
        ("Rank:0", 4),
        ("TrimM:2", 4),
        ("WinsorizedM:-1", 4),
        ("CVaR:0", 4),
        ("CVaR:1.5", 4),
        ("Quantile:nan", 4),
        ("HarrellDavis:1", 4),
        ("GMD", 1),
        ("LMoment:5", 4),
        ("Mean:2", 4),
        ("1,2", 3),
        ("1,inf,2", 3),
        ("1,x", 2),
        ([1.0], 2),
    ],
)
def test_bad_objectives_raise_with_valid_forms(objective, k):
    with pytest.raises(ValueError, match="Valid forms"):
        rank_weights(objective, k)


@pytest.mark.parametrize("k", [0, -1, 2.0, True])
def test_bad_k(k):
    with pytest.raises(ValueError, match="k must be"):
        rank_weights("Mean", k)


def test_docs_preset_table_is_generated_from_the_registry():
    """docs/objectives.md shows `preset_table()` verbatim: the registry is the one source of presets."""
    from pathlib import Path

    from ordergrad_trl.core.objectives import PRESETS, VALID_OBJECTIVES, preset_table

    docs = (Path(__file__).resolve().parents[1] / "docs" / "objectives.md").read_text()
    assert preset_table() in docs, "docs/objectives.md's preset table is stale: paste preset_table() there"
    for preset in PRESETS.values():  # every preset is parsed, listed in errors, and its example is valid
        assert preset.form in VALID_OBJECTIVES
        assert rank_weights(preset.example.lower(), 4).shape == (4,)


def test_a_preset_name_two_presets_claim_is_refused():
    """Like the estimator registry: a duplicate name (or alias, any case) raises instead of shadowing one preset."""
    import dataclasses

    from ordergrad_trl.core import objectives

    clash = dataclasses.replace(objectives.PRESETS["maxrl"], name="Lowest", aliases=("max",))  # ReMax's alias
    with pytest.raises(ValueError, match="'max' is taken by 'ReMax' and 'Lowest'"):
        objectives._register(clash)
    with pytest.raises(ValueError, match="'MAXRL' is taken by 'MaxRL' and 'Lowest'"):
        objectives._register(dataclasses.replace(clash, aliases=("MAXRL",)))  # another preset's name, any case
    with pytest.raises(ValueError, match="objective preset name 'maxrl' is already registered by the preset "
                                         "'MaxRL:T'; the preset 'MAXRL:T' needs another name"):
        objectives._register(dataclasses.replace(clash, name="MAXRL", aliases=()))
    assert "lowest" not in objectives.PRESETS and objectives._find("max").name == "ReMax"
