"""studies/compare_headtohead.py, the pre-registered Max@8 vs MaxRL head-to-head, on synthetic units: interim without
a p-value; once complete, both primaries against scipy's one-sample t test, Holm by hand and math.comb; the verdict
rule and the README sentence for each verdict; the failure rule; the reproduction check gating the pooled seeds;
the driver's --summarize; and the pre-registration's text frozen at the commit its units run from."""

import hashlib
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import compare_headtohead as h2h  # noqa: E402
from helpers import bounded  # noqa: E402

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (the dev extra) is the independent oracle")
N, P = 16, 10


def _unit(name, correct, commit="h2hcommit"):
    arm, _, seed = name.partition("-s")
    return {"schema": 1, "unit": name, "arm": arm, "seed": int(seed), "num_samples": N, "commit": commit,
            "config": {"max_steps": 8}, "train_overrides": [], "train_log": [], "wall_s": 1.0,
            "eval": {"problem_ids": [f"p{i}" for i in range(P)], "correct": correct, "scored": [N] * P}}  # fmt: skip


def _pass(correct, k):
    return sum(1 - math.comb(N - c, k) / math.comb(N, k) for c in correct) / len(correct)


def _write(folder: Path, seeds, gen, skip=(), commit="h2hcommit") -> dict:
    """max8 (more spread: more pass@8, less pass@1) and maxrl units at `seeds`."""
    folder.mkdir(parents=True, exist_ok=True)
    counts = {}
    for s in seeds:
        for arm in h2h.ARMS:
            name = f"{arm}-s{s}"
            if name in skip:
                continue
            c = torch.randint(0, 5, (P,), generator=gen) * (4 if arm == "max8" else 1) + (0 if arm == "max8" else 4)
            counts[name] = c.clamp(0, N).tolist()
            (folder / f"{name}.json").write_text(json.dumps(_unit(name, counts[name], commit)))
    return counts


def test_interim_reports_no_p_value(tmp_path):
    assets = tmp_path / "compare_objectives_headtohead"
    counts = _write(assets, [25, 26, 27], torch.Generator().manual_seed(0), skip=("maxrl-s27",))
    r = h2h.summarize_headtohead(assets)
    assert not r["complete"] and "tests" not in r and r["units"]["present"] == 5
    d = [_pass(counts[f"max8-s{s}"], 8) - _pass(counts[f"maxrl-s{s}"], 8) for s in (25, 26)]
    assert r["interim"]["means"]["i"] == pytest.approx(sum(d) / 2, abs=1e-12)
    md = (tmp_path / "compare_objectives_headtohead.md").read_text()
    assert "Interim, descriptive only: 2 complete pairs" in md and "p =" not in md and "CI" not in md


def test_complete_head_to_head_matches_scipy_holm_and_pools_behind_the_reproduction_check(tmp_path):
    gen = torch.Generator().manual_seed(1)
    assets = tmp_path / "compare_objectives_headtohead"
    counts = _write(assets, h2h.SEEDS, gen)
    replication = tmp_path / "compare_objectives_replication"
    old = _write(replication, range(10, 14), gen, commit="oldcommit")
    repro = tmp_path / "compare_objectives_headtohead_repro"
    repro.mkdir()
    for name in h2h.REPRO_UNITS:
        (repro / f"{name}.json").write_text(json.dumps(_unit(name, old[name])))
    r = h2h.summarize_headtohead(assets, replication)
    assert r["complete"] and r["commits"] == ["h2hcommit"]
    d = [_pass(counts[f"max8-s{s}"], 8) - _pass(counts[f"maxrl-s{s}"], 8) for s in h2h.SEEDS]
    e = [_pass(counts[f"maxrl-s{s}"], 1) - _pass(counts[f"max8-s{s}"], 1) for s in h2h.SEEDS]
    raw = {"i": scipy_stats.ttest_1samp(d, 0.0).pvalue, "ii": scipy_stats.ttest_1samp(e, 0.0).pvalue}
    lo_name, hi_name = sorted(raw, key=raw.get)
    holm = {lo_name: min(1.0, 2 * raw[lo_name])}
    holm[hi_name] = max(holm[lo_name], min(1.0, raw[hi_name]))
    for name, values in (("i", d), ("ii", e)):
        t = r["tests"][name]
        sem = scipy_stats.sem(values)
        assert t["mean"] == pytest.approx(sum(values) / 15, abs=1e-12) and t["n"] == 15
        assert t["p"] == pytest.approx(raw[name], rel=1e-6) and t["p_holm"] == pytest.approx(holm[name], rel=1e-6)
        assert t["ci"] == pytest.approx(list(scipy_stats.t.interval(0.95, 14, loc=t["mean"], scale=sem)), abs=1e-9)
        assert t["ci_adjusted"] == pytest.approx(list(scipy_stats.t.interval(0.975, 14, loc=t["mean"], scale=sem)),
                                                 abs=1e-9)  # fmt: skip
        assert t["verdict"] == h2h.verdict(t["mean"], holm[name]) and t["above"] == sum(v > 0 for v in values)
    pooled = r["pooled"]
    assert pooled["seeds"] == [10, 11, 12, 13, *h2h.SEEDS] and pooled["reproduction_check"]["status"] == "passed"
    d_old = [_pass(old[f"max8-s{s}"], 8) - _pass(old[f"maxrl-s{s}"], 8) for s in range(10, 14)]
    assert pooled["i"]["p"] == pytest.approx(scipy_stats.ttest_1samp(d_old + d, 0.0).pvalue, rel=1e-6)
    md = (tmp_path / "compare_objectives_headtohead.md").read_text()
    assert h2h.readme_sentence(r) in md and "Valid only if the reproduction check passes: passed" in md
    moved = list(old["maxrl-s10"])
    moved[3] += 1
    (repro / "maxrl-s10.json").write_text(json.dumps(_unit("maxrl-s10", moved)))
    assert h2h.headtohead(assets, replication)["pooled"]["reproduction_check"]["status"] == "failed"


@pytest.mark.parametrize("mean, p_holm, expected", [(0.03, 0.01, "confirmed"), (-0.03, 0.01, "reversed"),
                                                     (0.03, 0.05, "not confirmed"), (-0.03, 0.2, "not confirmed")])
def test_verdict_rule(mean, p_holm, expected):
    assert h2h.verdict(mean, p_holm) == expected


def test_readme_sentence_follows_each_verdict():
    def test(mean, verdict):
        return {"mean": mean, "ci": [mean - 0.01, mean + 0.01], "p_holm": 0.004, "verdict": verdict, "n": 15}

    r = {"tests": {"i": test(0.031, "confirmed"), "ii": test(0.098, "confirmed")}}
    assert h2h.readme_sentence(r) == ("In a pre-registered head-to-head on 15 fresh seeds, Max@8's pass@8 was 3.1 "
                                      "points above MaxRL's [95% CI +2.1, +4.1] (Holm p = 0.004); MaxRL's pass@1 was "
                                      "9.8 points above Max@8's [95% CI +8.8, +10.8] (Holm p = 0.004).")  # fmt: skip
    r["tests"]["i"] = test(0.004, "not confirmed")
    r["tests"]["ii"] = test(-0.05, "reversed")
    sentence = h2h.readme_sentence(r)
    assert "Max@8's pass@8 over MaxRL's was not confirmed: +0.4 points" in sentence
    assert "MaxRL's pass@1 was 5.0 points below Max@8's, the reverse of the tested direction" in sentence


def test_a_seed_that_failed_three_times_is_missing_and_the_tests_run_on_complete_pairs(tmp_path):
    assets = tmp_path / "compare_objectives_headtohead"
    _write(assets, h2h.SEEDS, torch.Generator().manual_seed(2), skip=("maxrl-s31",))
    failures = [{"unit": "maxrl-s31", "error": "killed"}] * 2
    (tmp_path / "compare_objectives_headtohead_failures.json").write_text(json.dumps(failures))
    assert not h2h.headtohead(assets)["complete"]  # two failures: it is rerun, not dropped
    (tmp_path / "compare_objectives_headtohead_failures.json").write_text(json.dumps(failures * 2))
    r = h2h.headtohead(assets)
    assert r["complete"] and r["missing_seeds"] == [31] and r["tests"]["i"]["n"] == 14


def test_driver_summarizes_the_head_to_head_folder(tmp_path):
    assets = tmp_path / "compare_objectives_headtohead"
    _write(assets, [25], torch.Generator().manual_seed(4))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(REPO / "studies" / "compare_objectives.py"), "--summarize", "--assets_dir", str(assets)]
    result = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "**Pre-registered head-to-head**" in result.stdout and "2 of 30 units in" in result.stdout


def test_the_preregistration_is_unchanged_and_every_unit_ran_at_its_commit():
    """The plan is frozen once a unit ran: its text hashes as at e4186fc, the commit every unit must record."""
    results = (REPO / "docs" / "results.md").read_text()
    start = results.index("### Pre-registration: Max@8 vs MaxRL head-to-head")
    end = min(i for i in (results.find("<!-- headtohead:start -->", start), results.index("\n## ", start)) if i > 0)
    from test_published_results import as_preregistered  # its dated revisions undone

    digest = hashlib.sha256(as_preregistered(results[start:end]).rstrip("\n").encode()).hexdigest()
    assert digest == "c0c33436e8305d5ff58636be6b673c0b7868ff01e5bff24290d5e311cd6cc1ed"
    assets = REPO / "studies" / "assets" / "compare_objectives_headtohead"
    commits = {json.loads(p.read_text())["commit"] for p in assets.glob("*.json")}
    assert commits <= {"e4186fce522944d9b9696189346dc7c3b0f8a386"}, commits


def test_the_committed_report_is_what_its_units_give():
    from test_published_results import _same

    assets = REPO / "studies" / "assets" / "compare_objectives_headtohead"
    committed = json.loads((assets.parent / f"{assets.name}.json").read_text())
    fresh = json.loads(json.dumps(h2h.headtohead(assets, assets.parent / "compare_objectives_replication")))
    assert _same(fresh, committed), \
        "stale: rerun `compare_objectives.py --summarize --assets_dir studies/assets/compare_objectives_headtohead`"
    assert (assets.parent / f"{assets.name}.md").read_text() == h2h.table(committed) + "\n"


def test_docs_quote_the_head_to_head_at_its_stage():
    """docs/results.md's status block says how many units are in, at which commit, as the committed report has it,
    and gives no p-value or interval before every seed is in (then the pre-registered sentence, verbatim)."""
    import re

    report = json.loads((REPO / "studies" / "assets" / "compare_objectives_headtohead.json").read_text())
    results = (REPO / "docs" / "results.md").read_text()
    block = " ".join(results[results.index("<!-- headtohead:start -->"): results.index("<!-- headtohead:end -->")].split())
    assert f"{report['units']['present']} of {report['units']['expected']} units in" in block
    assert all(f"at {c[:7]}" in block for c in report["commits"])
    if report["complete"]:
        assert h2h.readme_sentence(report) in block
        assert h2h.readme_sentence(report) in " ".join((REPO / "README.md").read_text().split())
        assert f"{len(report['failures']) or 'no'} failed attempt" in block
        for name, arm, minus, k in h2h.ENDPOINTS:
            t = report["tests"][name]
            lo, hi = (h2h._pts(x) for x in t["ci_adjusted"])
            det = t["detectable"]
            assert f"**({name}) {h2h.LABEL[arm]} - {h2h.LABEL[minus]} on pass@{k}: {t['verdict']}.**" in block, name
            assert f"t = {t['t']:.2f} ({t['df']} df), p = {t['p']:.2g}, Holm p = {t['p_holm']:.2g}" in block or \
                f"t = {t['t']:.2f} ({t['df']} df), p = {t['p']:.3g}, Holm p = {t['p_holm']:.3g}" in block, name
            assert f"{t['ci_adjusted_level']:.1%} t CI [{lo}, {hi}]" in block, name
            assert f"{h2h.LABEL[arm]} was ahead at {t['above']} of {t['n']} seeds" in block, name
            if t["verdict"] == "not confirmed":
                assert f"({100 * det['sd']:.1f} points)" in block and f"effect of {100 * det['effect']:.1f} points " \
                    f"({100 * det['effect_range'][0]:.1f} to {100 * det['effect_range'][1]:.1f})" in block, name
        pooled = report.get("pooled")
        if pooled:  # exploratory, and said to stand only on the reproduction check
            assert f"reproduction check {pooled['reproduction_check']['status']}" in block
            if pooled["reproduction_check"]["status"] == "passed":
                for name, *_ in h2h.ENDPOINTS:
                    t = pooled[name]
                    assert f"({name}) {h2h._pts(t['mean'])} [{h2h._pts(t['ci'][0])}, {h2h._pts(t['ci'][1])}], " \
                        f"p = {t['p']:.2g}" in block, name
        seeds = report["ceiling"]["seeds"]
        assert f"at {len(seeds)} of {len(report['design']['seeds'])} seeds ({', '.join(map(str, seeds))})" in block
    else:
        assert "under way" in block and not re.search(r"\bp\s*[=<]|CI \[", block)


def test_docs_state_the_reproduction_check_as_the_reruns_have_it():
    """docs/results.md: both reruns at the design's commit gave the committed units' counts and training rewards."""
    report = json.loads((REPO / "studies" / "assets" / "compare_objectives_headtohead.json").read_text())
    check = report.get("pooled", {}).get("reproduction_check")
    if not check or check["status"] == "not available":
        pytest.skip("the reproduction units have not run")
    assets = REPO / "studies" / "assets"
    results = " ".join((REPO / "docs" / "results.md").read_text().split())
    pairs = [(json.loads((assets / "compare_objectives_replication" / f"{u}.json").read_text()),
              json.loads((assets / check["path"] / f"{u}.json").read_text())) for u in h2h.REPRO_UNITS]  # fmt: skip
    assert f"**Reproduction check: {check['status']}.**" in results
    counts = " and ".join(str(sum(rerun["eval"]["correct"])) for _, rerun in pairs)
    assert f"({counts} of {sum(pairs[0][1]['eval']['scored'])})" in results
    for orig, rerun in pairs:
        assert rerun["eval"]["correct"] == orig["eval"]["correct"]
        assert [s["reward"] for s in rerun["train_log"]] == [s["reward"] for s in orig["train_log"]]
        assert max(abs(a["grad_norm"] - b["grad_norm"]) for a, b in zip(orig["train_log"], rerun["train_log"])) < 8e-6


@pytest.mark.parametrize("t, df", [(2.526, 27.55), (-1.39, 27.9), (0.3, 3.5), (6.0, 14.0), (0.0, 9.2), (-40.0, 2.1)])
def test_t_sf_with_real_degrees_of_freedom_matches_scipy(t, df):
    from compare_seed_level import t_sf

    assert t_sf(t, df) == pytest.approx(scipy_stats.t.sf(t, df), abs=1e-9)


def test_between_sets_welch_and_random_effects_by_hand_and_the_ceiling_breakdown(tmp_path):
    """Post hoc: each set of seeds' mean of each endpoint, Welch's test of the two sets (scipy) and the
    DerSimonian-Laird random-effects interval (by hand); and the seeds where one arm alone is at the ceiling."""
    gen = torch.Generator().manual_seed(5)
    assets = tmp_path / "compare_objectives_headtohead"
    counts = _write(assets, h2h.SEEDS, gen)
    replication = tmp_path / "compare_objectives_replication"
    old = _write(replication, range(10, 16), gen, commit="oldcommit")
    r = h2h.headtohead(assets, replication)
    d_old = [_pass(old[f"max8-s{s}"], 8) - _pass(old[f"maxrl-s{s}"], 8) for s in range(10, 16)]
    d = [_pass(counts[f"max8-s{s}"], 8) - _pass(counts[f"maxrl-s{s}"], 8) for s in h2h.SEEDS]
    b = r["between_sets"]["i"]
    assert [x["seeds"] for x in b["sets"]] == [list(range(10, 16)), list(h2h.SEEDS)]
    assert b["sets"][0]["mean"] == pytest.approx(sum(d_old) / 6, abs=1e-12)
    assert b["sets"][1]["pass@8"]["maxrl"] == pytest.approx(sum(_pass(counts[f"maxrl-s{s}"], 8) for s in h2h.SEEDS) / 15)
    welch = scipy_stats.ttest_ind(d_old, d, equal_var=False)
    assert b["welch"]["p"] == pytest.approx(welch.pvalue, abs=1e-9) and b["welch"]["t"] == pytest.approx(welch.statistic)
    y = [sum(d_old) / 6, sum(d) / 15]
    v = [scipy_stats.tstd(d_old) ** 2 / 6, scipy_stats.tstd(d) ** 2 / 15]
    w = [1 / x for x in v]
    q = sum(wi * (yi - (w[0] * y[0] + w[1] * y[1]) / sum(w)) ** 2 for wi, yi in zip(w, y))
    tau2 = max(0.0, (q - 1) / (sum(w) - (w[0] ** 2 + w[1] ** 2) / sum(w)))
    ws = [1 / (x + tau2) for x in v]
    mean, se = (ws[0] * y[0] + ws[1] * y[1]) / sum(ws), sum(ws) ** -0.5
    re_ = b["random_effects"]
    assert re_["mean"] == pytest.approx(mean, abs=1e-12) and re_["tau"] == pytest.approx(tau2**0.5, abs=1e-12)
    assert re_["ci"] == pytest.approx([mean - scipy_stats.norm.ppf(0.975) * se, mean + scipy_stats.norm.ppf(0.975) * se])
    p8 = {u: _pass(c, 8) for u, c in counts.items()}
    c = r["ceiling"]
    for arm, other in (("max8", "maxrl"), ("maxrl", "max8")):
        assert c["alone"][arm] == [s for s in h2h.SEEDS if p8[f"{arm}-s{s}"] >= 0.98 > p8[f"{other}-s{s}"]]
    assert c["both"] == [s for s in h2h.SEEDS if min(p8[f"max8-s{s}"], p8[f"maxrl-s{s}"]) >= 0.98]
    rest = [x for s, x in zip(h2h.SEEDS, d) if s not in c["alone"]["maxrl"]]
    assert c["i_mean_elsewhere"] == pytest.approx(sum(rest) / len(rest), abs=1e-12)


def test_docs_quote_the_between_set_disagreement_the_ceiling_and_the_bound_as_the_report_has_them():
    """Issue 49: beside the pooled result, the two seed sets' disagreement on (i) and a random-effects interval (F1);
    the ceiling seeds split by which arm was there (F3); the 97.5% interval's bound on a Max@8 lead (F6). In
    docs/results.md, the guide and the README, each number as the committed report has it."""
    report = json.loads((REPO / "studies" / "assets" / "compare_objectives_headtohead.json").read_text())

    def flat(path):
        return " ".join((REPO / path).read_text().split())

    results, guide, readme = flat("docs/results.md"), flat("docs/choosing-an-objective.md"), flat("README.md")
    block = results[results.index("<!-- headtohead:start -->"): results.index("<!-- headtohead:end -->")]
    pts, pct = h2h._pts, (lambda x: f"{h2h.stable(100 * x):.1f}%")
    b = report["between_sets"]
    (old, new), re_, welch = b["i"]["sets"], b["i"]["random_effects"], b["i"]["welch"]
    assert old["seeds"] == list(range(10, 25)) and new["seeds"] == list(range(25, 40))
    assert old["mean"] > 0 > new["mean"] and welch["p"] < 0.05  # "the two sets disagree"
    re_cell = f"{pts(re_['mean'])} [{pts(re_['ci'][0])}, {pts(re_['ci'][1])}]"
    assert f"Max@8 - MaxRL on pass@8 was {pts(old['mean'])} [{pts(old['ci'][0])}, {pts(old['ci'][1])}] at seeds 10-24 " \
        f"and {pts(new['mean'])} [{pts(new['ci'][0])}, {pts(new['ci'][1])}] at seeds 25-39 (Welch p = " \
        f"{welch['p']:.2g}), and the shift is MaxRL's pass@8 ({pct(old['pass@8']['maxrl'])} at seeds 10-24, " \
        f"{pct(new['pass@8']['maxrl'])} at 25-39; Max@8's {pct(old['pass@8']['max8'])} and " \
        f"{pct(new['pass@8']['max8'])})" in block
    assert f"(DerSimonian-Laird over the two, post hoc) is {re_cell}" in block
    (e_old, e_new), e_welch = b["ii"]["sets"], b["ii"]["welch"]
    assert f"On pass@1 they agree ({pts(e_old['mean'])} and {pts(e_new['mean'])}, Welch p = {e_welch['p']:.2g})" in block
    assert f"disagree on pass@8 (Welch p = {welch['p']:.2g}, post hoc), and the shift is MaxRL's pass@8 " \
        f"({pct(old['pass@8']['maxrl'])} at seeds 10-24, {pct(new['pass@8']['maxrl'])} at 25-39)" in guide
    assert f"random-effects interval over both sets (post hoc) is {re_cell}" in guide
    assert f"Max@8's pass@8 was {pts(old['mean'])[1:]} points ahead" in guide
    assert f"at seeds 10-24 it led by {pts(old['mean'])[1:]}; random-effects over both sets (post hoc): {re_cell}" in readme
    c, d = report["ceiling"], {row["seed"]: row["i"] for row in report["per_seed"]}
    only = c["alone"]["maxrl"]
    gaps = sorted(-d[s] for s in only)
    assert all(x > 0 for x in gaps) and c["i_mean_elsewhere"] > 0 > report["tests"]["i"]["mean"]  # "carry the lead"
    assert f"Both arms were there at only {len(c['both'])} of the {len(c['seeds'])} ({', '.join(map(str, c['both']))})" in block
    assert f"At {len(only)} ({', '.join(map(str, only))}) MaxRL alone was, with Max@8 {h2h.stable(100 * gaps[0]):.1f} " \
        f"to {h2h.stable(100 * gaps[-1]):.1f} points lower, and at {len(c['alone']['max8'])} " \
        f"({', '.join(map(str, c['alone']['max8']))}) Max@8 alone" in block
    assert f"at the other {len(d) - len(only)} seeds Max@8 - MaxRL averages {pts(c['i_mean_elsewhere'])} points" in block
    bound = pts(report["tests"]["i"]["ci_adjusted"][1])[1:]
    assert f"the 97.5% interval excludes a Max@8 lead above {bound} points" in block
    assert f"the 97.5% interval excludes a Max@8 lead above {bound} points" in guide
    assert "small pass@8" not in guide and "leaves room for" not in block
