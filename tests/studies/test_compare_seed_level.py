"""studies/compare_seed_level.py: the chi-square SD interval, the sign test, and what the ten-seed summary adds to the
pre-registered analysis (adjusted intervals, the primaries without the seeds seen first, ceiling seeds, the
base-model sign test), each against scipy as the independent oracle."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import compare_seed_level  # noqa: E402
import compare_summary  # noqa: E402

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (the dev extra) is the independent oracle")

ARMS = {
    "rloo": ["--ordergrad_objective", "Mean", "--ordergrad_k", "1"],
    "max5": ["--ordergrad_objective", "ReMax", "--ordergrad_k", "5"],
    "min4": ["--ordergrad_objective", "ReMin", "--ordergrad_k", "4"],
}


@pytest.mark.parametrize("df", [1, 2, 9, 14, 24])
def test_chi2_quantiles_and_the_sd_interval_match_scipy(df):
    for p in (0.025, 0.5, 0.975):
        assert compare_seed_level.chi2_ppf(p, df) == pytest.approx(scipy_stats.chi2.ppf(p, df), rel=1e-9)
    low, high = compare_seed_level.sd_interval(0.07, df + 1)
    assert low == pytest.approx(0.07 * math.sqrt(df / scipy_stats.chi2.ppf(0.975, df)), rel=1e-9)
    assert high == pytest.approx(0.07 * math.sqrt(df / scipy_stats.chi2.ppf(0.025, df)), rel=1e-9)
    with pytest.raises(ValueError, match="0 < p < 1"):
        compare_seed_level.chi2_ppf(1.0, df)


def test_detectable_effect_carries_the_sd_uncertainty():
    det = compare_seed_level.detectable(0.05, 10, 0.05, 0.8)
    # the effect is linear in the SD: its range is the effect scaled by the SD interval's ends
    for end, sd_end in zip(det["effect_range"], det["sd_ci"]):
        assert end == pytest.approx(det["effect"] * sd_end / 0.05, rel=1e-12)
    assert det["effect_range"][0] < det["effect"] < det["effect_range"][1]


@pytest.mark.parametrize("diffs", [[1] * 43, [1, 1, -1, 1, 0, 1, 1, 1, -1, 1], [-1, -1, 1], [0, 0]])
def test_sign_test_matches_scipy_binomtest(diffs):
    got = compare_seed_level.sign_test(diffs)
    n, above = sum(d != 0 for d in diffs), sum(d > 0 for d in diffs)
    assert (got["n"], got["above"], got["ties"]) == (n, above, len(diffs) - n)
    if n:
        assert got["p"] == pytest.approx(scipy_stats.binomtest(above, n, 0.5).pvalue, rel=1e-12)
        assert got["p_one_sided"] == pytest.approx(scipy_stats.binomtest(above, n, 0.5, "greater").pvalue, rel=1e-12)
    if diffs == [1] * 43:
        assert got["p"] == 2 * 0.5**43


def _unit(unit, correct, n):
    arm, _, seed = unit.partition("-s")
    return {"schema": 1, "unit": unit, "arm": arm, "seed": int(seed) if seed else None, "num_samples": n,
            "train_log": [{"step": 1, "reward": 0.5}], "wall_s": 1.0,
            "eval": {"problem_ids": [f"p{i}" for i in range(len(correct))], "correct": correct,
                     "scored": [n] * len(correct)}}  # fmt: skip


def test_summary_adds_adjusted_intervals_unseen_seeds_ceiling_and_sign_test(tmp_path):
    n, gen = 6, torch.Generator().manual_seed(5)
    assets = tmp_path / "units"
    assets.mkdir()
    counts = {"base": torch.randint(0, 2, (10,), generator=gen).tolist()}  # a weak base model
    for s in range(6):
        for arm in ARMS:
            counts[f"{arm}-s{s}"] = torch.randint(1, n + 1, (10,), generator=gen).tolist()
    counts["rloo-s4"] = [n] * 10  # RLOO solves everything at seed 4: every endpoint at the ceiling there
    for unit, c in counts.items():
        (assets / f"{unit}.json").write_text(json.dumps(_unit(unit, c, n)))
    summary = compare_summary.summarize(assets, list(ARMS), arm_flags=ARMS, seen_seeds=(0, 1))
    sl = summary["seed_level"]
    assert [e["arm"] for e in sl["primaries"]] == ["max5", "min4"]
    for e in sl["primaries"]:
        d = torch.tensor(e["per_seed"], dtype=torch.float64)
        ci = scipy_stats.ttest_1samp(d.numpy(), 0).confidence_interval(1 - 0.05 / 2)
        assert e["ci_adjusted"] == pytest.approx([ci.low, ci.high], rel=1e-9)
        k, at_least = (5, lambda c: 1 - math.comb(n - c, 5) / math.comb(n, 5)) if e["arm"] == "max5" else \
            (4, lambda c: math.comb(c, 4) / math.comb(n, 4))  # fmt: skip
        rloo = [sum(at_least(c) for c in counts[f"rloo-s{s}"]) / 10 for s in range(6)]
        assert e["ceiling_seeds"] == [s for s in range(6) if rloo[s] >= 0.98] and 4 in e["ceiling_seeds"], k
        later = scipy_stats.ttest_1samp(d[2:].numpy(), 0)
        (unseen,) = [u for u in sl["unseen"] if u["arm"] == e["arm"]]
        assert unseen["seeds"] == [2, 3, 4, 5] and unseen["p"] == pytest.approx(later.pvalue, rel=1e-9)
        sd_low, sd_high = compare_seed_level.sd_interval(float(d.std()), 6)
        assert e["sd_ci"] == pytest.approx([sd_low, sd_high], rel=1e-9)
    sign = summary["base_sign_test"]
    base = sum(counts["base"]) / (10 * n)
    diffs = [sum(counts[f"{a}-s{s}"]) / (10 * n) - base for a in ARMS for s in range(6)]
    assert sign["units"]["above"] == sum(d > 0 for d in diffs) and sign["units"]["n"] + sign["units"]["ties"] == 18
    assert sign["units"]["p"] == pytest.approx(scipy_stats.binomtest(sign["units"]["above"], sign["units"]["n"]).pvalue)
    assert sign["seeds"]["n"] + sign["seeds"]["ties"] == 6
    md = (tmp_path / "units.md").read_text()
    assert "The endpoints were chosen after seeds 0, 1 had been seen" in md and "| max5 | ReMax@5 | 2-5 |" in md
    assert "exact two-sided sign test over units" in md and "adjusted CI" in md
    assert md.count("**Secondary**") == 3  # every bootstrap table is labelled


def test_summary_labels_seed_counts_when_arms_differ(tmp_path):
    # GRPO at fewer seeds than the others: every table names each arm's seeds, and the values table says so
    assets = tmp_path / "units"
    assets.mkdir()
    for unit in ("rloo-s0", "rloo-s1", "rloo-s2", "grpo-s0"):
        (assets / f"{unit}.json").write_text(json.dumps(_unit(unit, [1, 2, 3], 4)))
    compare_summary.summarize(assets, ["grpo", "rloo"])
    md = (tmp_path / "units.md").read_text()
    assert "| grpo | 1 |" in md and "| rloo | 3 |" in md and "The arms have different seeds" in md
    diffs = md[md.index("Differences vs RLOO"):]
    assert "| grpo | 1 |" in diffs  # the paired difference uses the one seed both have
