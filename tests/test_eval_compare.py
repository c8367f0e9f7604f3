"""`ordergrad-eval compare` against independent oracles: paired differences against per-problem arithmetic (exact
fractions), the bootstrap interval against a second implementation of the percentile bootstrap, sign-flip p-values
against enumeration (and a binomial closed form on the sampled path), seed-level t intervals against scipy and
Holm by hand; a run compared with itself gives 0 exactly; each protocol field refused by name; hostile inputs
refused in one line.
"""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from helpers.compare_runs import scored_run
from helpers.eval_runs import cli_error

from ordergrad_trl.core.stats import sign_flip_pvalue
from ordergrad_trl.evaluation.compare import compare
from ordergrad_trl.evaluation.errors import UsageError
from ordergrad_trl.evaluation.protocol_header import MISMATCH_FIELDS

FAST = dict(bootstrap_samples=300, plot=False)
BASE = {"p0": [1, 0, 0, 0], "p1": [1, 1, 0, 0], "p2": [0, 0, 0, 0], "p3": [1, 1, 1, 1], "p4": [1, 0, 1, 0]}
OTHER = {"p0": [1, 1, 0, 0], "p1": [1, 1, 1, 0], "p2": [1, 0, 0, 0], "p3": [1, 1, 1, 0], "p4": [1, 1, 1, 1]}


def pass_at(cs: list[int], k: int) -> Fraction:
    n, c = len(cs), sum(cs)
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def pass_hat(cs: list[int], k: int) -> Fraction:
    return Fraction(math.comb(sum(cs), k), math.comb(len(cs), k))


def brute_sign_flip(d: list[Fraction]) -> Fraction:
    """P(|sum s_i d_i| >= |sum d_i|) over all sign vectors, in exact arithmetic."""
    observed = abs(sum(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= observed for signs in itertools.product((1, -1),
                                                                                                   repeat=len(d)))
    return Fraction(hits, 2 ** len(d))


def test_paired_differences_and_p_values_match_arithmetic(tmp_path):
    base, other = scored_run(tmp_path / "base", BASE), scored_run(tmp_path / "other", OTHER)
    result = compare(base, other, output_dir=tmp_path / "cmp", ks=[1, 2, 4], **FAST)
    d = result["comparisons"][0]["datasets"]["toy"]
    for name, fn in (("pass@{k}", pass_at), ("pass^{k}", pass_hat)):
        for k in (1, 2, 4):
            diffs = [fn(OTHER[p], k) - fn(BASE[p], k) for p in BASE]
            e = d["metrics"][name.format(k=k)]
            assert e["difference"] == pytest.approx(float(sum(diffs) / len(diffs)), abs=1e-12)
            assert e["num_problems"] == 5
            # five differences: the exact path, checked against exact enumeration
            assert e["p_method"] == "exact sign-flip"
            assert e["p_value"] == pytest.approx(float(brute_sign_flip(diffs)), abs=1e-12)
    on_disk = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert on_disk["comparisons"][0]["datasets"]["toy"]["metrics"]["pass@1"]["ci"] == d["metrics"]["pass@1"]["ci"]
    assert "| pass@1 |" in (tmp_path / "cmp" / "compare.md").read_text()


def test_bootstrap_interval_matches_an_independent_implementation(tmp_path):
    rng = np.random.default_rng(3)
    base_c = {f"p{i}": rng.integers(0, 2, 4).tolist() for i in range(30)}
    other_c = {f"p{i}": rng.integers(0, 2, 4).tolist() for i in range(30)}
    base, other = scored_run(tmp_path / "b", base_c), scored_run(tmp_path / "o", other_c)
    b, seed, level = 500, 7, 0.9
    result = compare(base, other, output_dir=tmp_path / "cmp", ks=[1, 4], bootstrap_samples=b, bootstrap_seed=seed,
                     ci_level=level, plot=False)
    e = result["comparisons"][0]["datasets"]["toy"]["metrics"]["pass@4"]
    diffs = np.array([float(pass_at(other_c[p], 4) - pass_at(base_c[p], 4)) for p in base_c])
    # the same documented resampling (torch's seeded draw of problem indices), means and quantiles done apart
    idx = torch.randint(len(diffs), (b, len(diffs)), generator=torch.Generator().manual_seed(seed)).numpy()
    means = np.array([diffs[row].sum() / len(row) for row in idx])
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    assert e["ci"] == pytest.approx([low, high], abs=1e-12)


def test_a_run_compared_with_itself_is_zero_exactly(tmp_path):
    base = scored_run(tmp_path / "b", BASE)
    result = compare(base, base, output_dir=tmp_path / "cmp", ks=[1, 4], objectives=["TopM:2@4"], **FAST)
    d = result["comparisons"][0]["datasets"]["toy"]
    for e in [*d["metrics"].values(), *d["objectives"].values()]:
        assert e["difference"] == 0.0 and e["ci"] == [0.0, 0.0] and e["p_value"] == 1.0


@pytest.mark.parametrize("case", [[3.0, -1.0, 2.0, 2.0], [0.5, 0.5, -0.25], [1.0, 0.0, -1.0], [0.1] * 7,
                                  [0.3, -0.2, 0.1, 0.7, -0.4, 0.25, 0.05, -0.6, 0.9, 0.15]])
def test_sign_flip_exact_matches_enumeration(case):
    p, exact = sign_flip_pvalue(torch.tensor(case, dtype=torch.float64))
    assert exact
    expected = brute_sign_flip([Fraction(x).limit_denominator(10**6) for x in case])
    assert float(p) == pytest.approx(float(expected), abs=1e-12)


def test_sign_flip_sampled_matches_the_binomial_closed_form():
    # 20 differences of +-1 (too many to enumerate): |sum| = |2X - m| with X ~ Bin(m, 1/2) under the null
    a, m, draws = 14, 20, 40_000
    d = torch.tensor([1.0] * a + [-1.0] * (m - a))
    p, exact = sign_flip_pvalue(d, num_samples=draws, seed=1)
    assert not exact
    closed = sum(math.comb(m, x) for x in range(m + 1) if abs(2 * x - m) >= abs(2 * a - m)) / 2**m
    assert abs(float(p) - closed) < 5 * math.sqrt(closed * (1 - closed) / draws) + 1 / draws


def test_groups_match_scipy_t_and_holm_by_hand(tmp_path):
    from scipy import stats as sst

    rng = np.random.default_rng(0)
    groups, values = {}, {}
    for name, bias in (("base", 0.3), ("ck", 0.6)):
        for s in range(3):
            c = {f"p{i}": (rng.random(4) < bias).astype(int).tolist() for i in range(6)}
            groups.setdefault(name, []).append(scored_run(tmp_path / f"{name}{s}", c))
            values.setdefault(name, []).append(c)
    result = compare(groups=groups, output_dir=tmp_path / "cmp", ks=[1, 4], metrics=["pass@1", "pass@4"], **FAST)
    sl = result["seed_level"]
    assert sl["family_size"] == 2
    ps = {}
    for key, k in (("pass@1", 1), ("pass@4", 4)):
        per_seed = [float(sum(pass_at(g[p], k) - pass_at(b[p], k) for p in g) / len(g))
                    for g, b in zip(values["ck"], values["base"])]
        e = sl["groups"]["ck"]["datasets"]["toy"]["metrics"][key]
        assert e["per_seed"] == pytest.approx(per_seed, abs=1e-12)
        res = sst.ttest_1samp(per_seed, 0.0)
        half = sst.t.ppf(0.975, 2) * np.std(per_seed, ddof=1) / math.sqrt(3)
        assert e["difference"] == pytest.approx(np.mean(per_seed), abs=1e-12)
        assert e["p_value"] == pytest.approx(res.pvalue, rel=1e-9)
        assert e["ci"] == pytest.approx([np.mean(per_seed) - half, np.mean(per_seed) + half], abs=1e-9)
        ps[key] = e["p_value"]
    # Holm with two p-values: the smaller times 2, the larger as is, then made monotone
    (k_low, p_low), (k_high, p_high) = sorted(ps.items(), key=lambda kv: kv[1])
    expected = {k_low: min(1.0, 2 * p_low), k_high: max(min(1.0, 2 * p_low), p_high)}
    for key, want in expected.items():
        assert sl["groups"]["ck"]["datasets"]["toy"]["metrics"][key]["p_holm"] == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("field", list(MISMATCH_FIELDS))
def test_each_protocol_difference_is_refused_by_name(tmp_path, field):
    change = {
        "problems": dict(golds={p: "8" for p in BASE}),
        "n": dict(correct={p: v[:3] for p, v in BASE.items()}),
        "temperature": dict(sampling={"temperature": 0.6}),
        "top_p": dict(sampling={"top_p": 0.95}),
        "top_k": dict(sampling={"top_k": 20}),
        "max_new_tokens": dict(sampling={"max_new_tokens": 32768}),
        "template": dict(prompt={"system_prompt": "Reason step by step."}),
        "chat_template": dict(prompt={"chat_template_sha256": "ab" * 32}),
        "grader": dict(grader={"name": "math-verify", "versions": ["0.8.0"], "reward_timeout_s": [10.0]}),
        "reward": dict(grader={"name": "math-verify", "versions": ["0.9.0"], "reward_timeout_s": [5.0]}),
    }[field]
    base = scored_run(tmp_path / "b", BASE)
    other = scored_run(tmp_path / "o", change.pop("correct", BASE), **change)
    with pytest.raises(UsageError) as err:
        compare(base, other, output_dir=tmp_path / "cmp", ks=[1], **FAST)
    message = str(err.value)
    assert f"{field} (" in message and f"--allow_mismatch {field}" in message and "\n" not in message
    if field == "problems":  # no shared problem: nothing to pair even when allowed
        return
    result = compare(base, other, output_dir=tmp_path / "cmp", ks=[1], allow_mismatch=[field], **FAST)
    assert field in result["allowed_mismatches"]
    assert "Protocols differ" in (tmp_path / "cmp" / "compare.md").read_text()


def test_hostile_inputs_are_refused_in_one_line(tmp_path, capsys):
    base, other = scored_run(tmp_path / "b", BASE), scored_run(tmp_path / "o", OTHER)
    out = str(tmp_path / "cmp")
    # a group of one seed
    err = cli_error(capsys, ["compare", "--groups", f"a={base}", f"b={other}", "--output_dir", out])
    assert "has one run" in err
    err = cli_error(capsys, ["compare", str(base), "--output_dir", out])
    assert "at least one OTHER" in err
    err = cli_error(capsys, ["compare", str(base), str(other), "--allow_mismatch", "colour", "--output_dir", out])
    assert "--allow_mismatch must name fields among problems, n," in err
    err = cli_error(capsys, ["compare", str(base), str(other), "--metrics", "pass@3", "--ks", "1", "--output_dir", out])
    assert "--metrics pass@3" in err
    err = cli_error(capsys, ["compare", str(base), str(base), "--output_dir", str(base)])
    assert "compare writes to a directory of its own" in err
    # a tampered run: a score edited by hand
    scores = tmp_path / "o" / "toy" / "scores.jsonl"
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    rows[0]["correct"] = 1.0 - rows[0]["correct"]
    scores.write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = cli_error(capsys, ["compare", str(base), str(other), "--output_dir", out])
    assert "scores.jsonl" in err


def test_command_line_compare_prints_and_writes(tmp_path, capsys):
    base, other = scored_run(tmp_path / "b", BASE), scored_run(tmp_path / "o", OTHER)
    from ordergrad_trl.evaluation.cli import command

    result = command(["compare", str(base), str(other), "--output_dir", str(tmp_path / "cmp"), "--ks", "1", "4",
                      "--bootstrap_samples", "200"])
    printed = capsys.readouterr().out
    assert "# Comparison" in printed and "Protocol:" in printed
    assert set(result["comparisons"][0]["datasets"]["toy"]["metrics"]) >= {"pass@1", "pass@4", "pass^4", "maj@4"}
    assert (tmp_path / "cmp" / "compare.png").is_file()
