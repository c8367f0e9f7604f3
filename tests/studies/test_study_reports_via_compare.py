"""The studies' primaries come out of `ordergrad-eval compare` (issue 61): the crossover's endpoints computed by the
study from its unit records, and by `compare --groups --contrasts` from scored runs holding the same correct
counts, agree to 1e-12 and print the same digits (mean, intervals, p, Holm p)."""

import sys
from pathlib import Path

import pytest
import torch
from helpers.compare_runs import scored_run

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import compare_crossover as cx  # noqa: E402
from test_compare_crossover import N, _write  # noqa: E402 (synthetic crossover units)

from ordergrad_trl.evaluation.compare import compare  # noqa: E402

pytest.importorskip("scipy.stats", reason="scipy (the dev extra) backs the crossover tests imported here")


def test_crossover_primaries_are_compare_contrasts_to_the_printed_digit(tmp_path):
    seeds = list(cx.SEEDS[:3])
    counts = _write(tmp_path / "units", seeds, torch.Generator().manual_seed(5))
    units = {name: {"eval": {"correct": c}, "num_samples": N} for name, c in counts.items()}
    study = cx.primary_tests(*cx.endpoint_family(units, seeds, cx.ENDPOINTS), cx.ALPHA, cx.POWER)

    groups = {arm: [scored_run(tmp_path / "runs" / f"{arm}-s{s}",
                               {f"p{i}": [0] * (N - c) + [1] * c for i, c in enumerate(counts[f"{arm}-s{s}"])})
                    for s in seeds] for arm in cx.ARMS}  # fmt: skip
    contrasts = {name: f"{arm}-{minus}:pass@{k}" for name, arm, minus, k in cx.ENDPOINTS}
    result = compare(groups=groups, output_dir=tmp_path / "cmp", ks=[1, 2, 8, 16], contrasts=list(contrasts.values()),
                     alpha=cx.ALPHA, bootstrap_samples=100, plot=False)
    assert result["seed_level"]["family_size"] == len(cx.ENDPOINTS)
    for name, text in contrasts.items():
        t, e = study[name], result["seed_level"]["contrasts"][text]["datasets"]["toy"]
        pairs = [(t["mean"], e["difference"]), (t["p"], e["p_value"]), (t["p_holm"], e["p_holm"]),
                 *zip(t["ci"], e["ci"]), *zip(t["ci_adjusted"], e["ci_adjusted"])]
        for mine, theirs in pairs:
            assert theirs == pytest.approx(mine, rel=1e-12, abs=1e-14)
        for mine, theirs in pairs[:1] + pairs[3:]:  # as the report prints them: points to one decimal
            assert cx._pts(theirs) == cx._pts(mine)
        assert f"{e['p_value']:.3g} {e['p_holm']:.3g}" == f"{t['p']:.3g} {t['p_holm']:.3g}"
