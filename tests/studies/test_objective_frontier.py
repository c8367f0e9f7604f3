"""studies/objective_frontier.py on synthetic units, against math.comb and scipy's t: sets split by commit, units
without a commit left out, pairs on common seeds, reproduction checks linking commits; the CLI from another
directory; and the committed report rebuilt from the committed units."""

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import objective_frontier  # noqa: E402
from helpers import bounded  # noqa: E402

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (the dev extra) is the independent oracle")
N, P = 16, 9


def _unit(name, correct, commit):
    arm, _, seed = name.partition("-s")
    return {"schema": 1, "unit": name, "arm": arm, "seed": int(seed) if seed else None, "num_samples": N,
            "commit": commit, "config": {"max_steps": 8}, "train_overrides": [], "train_log": [], "wall_s": 1.0,
            "eval": {"problem_ids": [f"p{i}" for i in range(P)], "correct": correct, "scored": [N] * P}}  # fmt: skip


def _passes(correct, k):
    """pass@k and pass^k of one unit: means over problems of 1 - C(N-c,k)/C(N,k) and C(c,k)/C(N,k)."""
    at = sum(1 - math.comb(N - c, k) / math.comb(N, k) for c in correct) / len(correct)
    hat = sum(math.comb(c, k) / math.comb(N, k) for c in correct) / len(correct)
    return {"pass@k": at, "pass^k": hat}


def _t(values):
    """scipy's mean, 95% t interval and two-sided p of per-seed values."""
    m, sem = sum(values) / len(values), scipy_stats.sem(values)
    if sem == 0:  # every seed alike (e.g. pass^16 = 0 everywhere): a point, and no evidence either way
        return m, [m, m], 1.0 if m == 0 else 0.0
    lo, hi = scipy_stats.t.interval(0.95, len(values) - 1, loc=m, scale=sem)
    return m, [lo, hi], scipy_stats.ttest_1samp(values, 0.0).pvalue


@pytest.fixture
def assets(tmp_path):
    gen = torch.Generator().manual_seed(3)
    counts = {}

    def write(folder, name, commit, shift=0, copy_of=None):
        c = counts[copy_of] if copy_of else (torch.randint(0, 13, (P,), generator=gen) + shift).clamp(0, N).tolist()
        counts.setdefault(name if not copy_of else f"{folder}/{name}", c)
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / f"{name}.json").write_text(json.dumps(_unit(name, c, commit)))
        return c

    for s in (3, 4, 5):
        write("compare_objectives", f"rloo-s{s}", "a" * 40)
        write("compare_objectives", f"max8-s{s}", "a" * 40, shift=3)
    write("compare_objectives", "rloo-s0", None)  # the first seeds recorded no commit
    write("compare_objectives", "grpo-s4", "b" * 40)  # another commit, seeds 4-5: paired with rloo there
    write("compare_objectives", "grpo-s5", "b" * 40)
    write("compare_objectives", "base", None)
    for s in (10, 11, 12, 13):
        write("compare_objectives_replication", f"rloo-s{s}", "b" * 40)
        write("compare_objectives_replication", f"max8-s{s}", "b" * 40, shift=2)
        write("compare_objectives_replication", f"maxrl-s{s}", "c" * 40, shift=1)
    write("compare_objectives_repro", "rloo-s3", "b" * 40, copy_of="rloo-s3")  # a rerun at b: links a and b
    (tmp_path / "compare_objectives_replication_repro").mkdir()
    moved = list(counts["rloo-s10"])
    moved[0] = (moved[0] + 1) % N
    (tmp_path / "compare_objectives_replication_repro" / "rloo-s10.json").write_text(
        json.dumps(_unit("rloo-s10", moved, "c" * 40)))  # a rerun at c that differs: b and c stay unlinked
    return tmp_path, counts


def test_sets_pool_one_arm_at_one_commit_and_match_math_comb_and_scipy(assets):
    path, counts = assets
    r = objective_frontier.frontier(path)
    assert set(r["sets"]) == {"rloo@aaaaaaa", "max8@aaaaaaa", "grpo@bbbbbbb", "rloo@bbbbbbb", "max8@bbbbbbb",
                              "maxrl@ccccccc"}  # fmt: skip
    assert r["left_out"] == [{"unit": "rloo-s0", "source": "compare_objectives", "why": "no recorded commit"}]
    assert r["sets"]["max8@bbbbbbb"]["seeds"] == [10, 11, 12, 13] and r["units"] == 21
    for key, s in r["sets"].items():
        for k in range(1, N + 1):
            per_seed = [_passes(counts[f"{s['arm']}-s{seed}"], k) for seed in s["seeds"]]
            for m in objective_frontier.METRICS:
                mean, ci, _ = _t([v[m] for v in per_seed])
                assert s[m]["mean"][k - 1] == pytest.approx(mean, abs=1e-12), (key, m, k)
                assert s[m]["ci"][k - 1] == pytest.approx(ci, abs=1e-9), (key, m, k)
    assert r["base"]["pass@k"][7] == pytest.approx(_passes(counts["base"], 8)["pass@k"], abs=1e-12)


def test_differences_are_paired_on_common_seeds_with_the_reference_subtracted(assets):
    path, counts = assets
    r = objective_frontier.frontier(path)
    pairs = {(e["set"], e["minus"]): e for e in r["differences"]}
    assert set(pairs) == {("max8@aaaaaaa", "rloo@aaaaaaa"), ("grpo@bbbbbbb", "rloo@aaaaaaa"),
                          ("max8@aaaaaaa", "grpo@bbbbbbb"), ("max8@bbbbbbb", "rloo@bbbbbbb"),
                          ("maxrl@ccccccc", "rloo@bbbbbbb"), ("maxrl@ccccccc", "max8@bbbbbbb")}  # fmt: skip
    assert pairs[("grpo@bbbbbbb", "rloo@aaaaaaa")]["seeds"] == [4, 5]
    assert pairs[("grpo@bbbbbbb", "rloo@aaaaaaa")]["linked_by"] == "rloo-s3"  # the passed rerun a -> b
    assert pairs[("maxrl@ccccccc", "rloo@bbbbbbb")]["linked_by"] is None  # its rerun b -> c differs on a problem
    assert pairs[("max8@bbbbbbb", "rloo@bbbbbbb")]["commits"] == "same"
    for (a, b), e in pairs.items():
        arm_a, arm_b = a.split("@")[0], b.split("@")[0]
        for k in (1, 8, 16):
            for m in objective_frontier.METRICS:
                d = [_passes(counts[f"{arm_a}-s{s}"], k)[m] - _passes(counts[f"{arm_b}-s{s}"], k)[m] for s in e["seeds"]]
                mean, ci, p = _t(d)
                assert e[m]["mean"][k - 1] == pytest.approx(mean, abs=1e-12)
                assert e[m]["ci"][k - 1] == pytest.approx(ci, abs=1e-9) and e[m]["p"][k - 1] == pytest.approx(p, abs=1e-9)
                assert e[m]["above"][k - 1] == sum(x > 0 for x in d)
    checks = {c["unit"]: c for c in r["reproduction_checks"]}
    assert checks["rloo-s3"]["status"] == "passed" and checks["rloo-s10"]["problems_differing"] == 1
    assert r["main_sets"] == {"rloo": "rloo@bbbbbbb", "grpo": "grpo@bbbbbbb", "max8": "max8@bbbbbbb",
                              "maxrl": "maxrl@ccccccc"}  # fmt: skip


def test_guide_rows_are_each_arm_against_rloo_then_main_pairs_and_a_head_to_head(assets):
    """The guide's rows: main sets minus RLOO, pairs of main sets, and two sets at one commit that are no arm's main
    set (a head-to-head without RLOO); not a main set against another arm's non-main set."""
    path, counts = assets
    for s in (30, 31, 32):
        for arm, shift in (("max8", 2), ("maxrl", 1)):
            c = (torch.tensor(counts[f"{arm}-s10"]) + shift - 1).clamp(0, N).tolist()
            (path / "compare_objectives_headtohead").mkdir(exist_ok=True)
            (path / "compare_objectives_headtohead" / f"{arm}-s{s}.json").write_text(
                json.dumps(_unit(f"{arm}-s{s}", c, "d" * 40)))
    r = objective_frontier.frontier(path)
    rows = [line.split(" | ")[:3] for line in objective_frontier.guide_table(r).splitlines()[2:]]
    got = [(a.split("`")[1], b.strip("`"), seeds) for a, b, seeds in rows]
    assert got == [("grpo", "rloo", "4-5 (2)"), ("max8", "rloo", "10-13 (4)"), ("maxrl", "rloo", "10-13 (4)"),
                   ("maxrl", "max8", "10-13 (4)"), ("maxrl", "max8", "30-32 (3)")]  # fmt: skip
    assert [(e["set"], e["minus"]) for e in objective_frontier.head_to_head(r)] == [("maxrl@ddddddd", "max8@ddddddd")]


def test_table_quotes_the_json(assets):
    path, _ = assets
    r = objective_frontier.frontier(path)
    md = objective_frontier.table(r)
    e = next(e for e in r["differences"] if e["set"] == "max8@bbbbbbb")
    lo, hi = e["pass@k"]["ci"][7]
    assert f"{100 * e['pass@k']['mean'][7]:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]" in md
    assert "differ (linked by rloo-s3)" in md and "differ (not linked)" in md and "rloo-s0" in md


def test_units_of_two_protocols_are_refused(assets):
    path, _ = assets
    unit = json.loads((path / "compare_objectives" / "rloo-s3.json").read_text())
    unit["num_samples"] = 8
    (path / "compare_objectives" / "rloo-s3.json").write_text(json.dumps(unit))
    with pytest.raises(ValueError, match="differ in samples"):
        objective_frontier.frontier(path)


def test_cli_from_another_directory_writes_the_three_files(assets, tmp_path_factory):
    path, _ = assets
    elsewhere = tmp_path_factory.mktemp("cwd")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(REPO / "studies" / "objective_frontier.py"), "--assets_dir", str(path)]
    result = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert json.loads((path / "objective_frontier.json").read_text())["units"] == 21
    assert (path / "objective_frontier.md").read_text().startswith("# The pass@k frontier")
    empty = tmp_path_factory.mktemp("empty")
    result = bounded.run([*cmd[:2], "--assets_dir", str(empty)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=elsewhere)  # fmt: skip
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "no units" in result.stderr


def test_the_committed_frontier_is_what_the_committed_units_give():
    from test_published_results import _same

    committed = json.loads((objective_frontier.ASSETS / "objective_frontier.json").read_text())
    fresh = json.loads(json.dumps(objective_frontier.frontier()))
    assert _same(fresh, committed), "stale: rerun `python studies/objective_frontier.py`"
    assert (objective_frontier.ASSETS / "objective_frontier.md").read_text() == objective_frontier.table(committed) + "\n"


QUOTE = r"([+-]\d+\.\d+)(?: points)? \[(?:unadjusted 95% t CI |95% t CI |95% CI )?([+-]\d+\.\d+), ([+-]\d+\.\d+)\]"


def _segment(text: str, start: str, end: str) -> str:
    i = text.index(start)
    return " ".join(text[i : text.index(end, i)].split())  # sentences wrap anywhere


def test_the_guide_and_every_quoted_cost_are_the_committed_report():
    """docs/choosing-an-objective.md's table is the report's; every "mean [low, high]" that the guide, the README's
    replication sentences and docs/results.md's cost and maxrl bullets quote is a difference the report holds."""
    import re

    from objective_frontier import METRICS, _num
    from test_crossover_published import guide_section

    committed = json.loads((objective_frontier.ASSETS / "objective_frontier.json").read_text())
    guide = objective_frontier.GUIDE.read_text()
    start, end = (guide.index(m) for m in objective_frontier.GUIDE_MARKERS)
    assert guide[start:end].split("\n", 1)[1].strip() == objective_frontier.guide_table(committed)
    held = {(_num(e[m]["mean"][j], "+"), _num(e[m]["ci"][j][0], "+"), _num(e[m]["ci"][j][1], "+"))
            for e in committed["differences"] for m in METRICS for j in range(len(committed["ks"]))}  # fmt: skip
    readme = (REPO / "README.md").read_text()
    results = (REPO / "docs" / "results.md").read_text()
    segments = {
        # the digits20 section quotes its own panel (tests/studies/test_crossover_published.py)
        "guide outside its table": (guide[:start] + guide[end:]).replace(guide_section(guide), ""),
        "README caption": _segment(readme, "*SmolLM2-135M-Instruct", "## Installation"),
        "README replication": _segment(readme, "**Replication.**", "- **[Max@8 vs MaxRL]"),
        "README head-to-head": _segment(readme, "- **[Max@8 vs MaxRL]", "- **[Scoring caveat]"),
        "results cost bullet": _segment(results, "- **Its cost, on the same 30 units**", "- **Scope.**"),
        "results maxrl bullet": _segment(results, "- **Exploratory arm `maxrl`**", "```text"),
        "results head-to-head frontier": _segment(results, "- **The rest of the frontier, same units**", "- **Pooled"),
    }
    h2h = json.loads((objective_frontier.ASSETS / "compare_objectives_headtohead.json").read_text())
    primaries = {(_num(t["mean"], "+"), _num(t["ci"][0], "+"), _num(t["ci"][1], "+")) for t in h2h["tests"].values()}
    primaries |= {(_num(re_["mean"], "+"), _num(re_["ci"][0], "+"), _num(re_["ci"][1], "+"))  # post hoc, its report's
                  for re_ in (b["random_effects"] for b in h2h["between_sets"].values())}  # fmt: skip
    for where, text in segments.items():
        quoted = re.findall(QUOTE, " ".join(text.split()))
        quoted = [q for q in quoted if q not in primaries or where not in ("README head-to-head", "guide outside its table")]
        assert len(quoted) >= (1 if where == "README head-to-head" else 2), where
        assert not set(quoted) - held, f"{where} quotes {set(quoted) - held}, which the report does not hold"


def test_the_head_to_head_frontier_claim_holds_at_every_k():
    """docs/results.md: at seeds 25-39 no k of pass@k or pass^k has MaxRL minus Max@8's interval below 0; it is above
    0 at pass@1 to pass@5 (and no further) and at every pass^k."""
    committed = json.loads((objective_frontier.ASSETS / "objective_frontier.json").read_text())
    (e,) = [e for e in committed["differences"] if e["set"].startswith("maxrl@e4186fc") and e["minus"].startswith("max8@e4186fc")]
    assert e["seeds"] == list(range(25, 40))
    assert all(hi >= 0 for m in objective_frontier.METRICS for _, hi in e[m]["ci"])
    above = [k for k, (lo, _) in enumerate(e["pass@k"]["ci"], 1) if lo > 0]
    assert above == [1, 2, 3, 4, 5] and all(lo > 0 for lo, _ in e["pass^k"]["ci"])
    results = " ".join((REPO / "docs" / "results.md").read_text().split())
    assert "MaxRL's was above Max@8's at pass@1 to pass@5 and at every pass^k" in results


def test_docs_state_the_maxrl_reproduction_check_as_the_report_has_it():
    """docs/results.md says the maxrl arm's code state was checked by rerunning rloo-s10 at its commit: only if the
    report's check passed, with the correct count the rerun unit holds."""
    committed = json.loads((objective_frontier.ASSETS / "objective_frontier.json").read_text())
    (check,) = [c for c in committed["reproduction_checks"] if c["unit"] == "rloo-s10"]
    rerun = json.loads((objective_frontier.ASSETS / check["path"]).read_text())
    results = " ".join((REPO / "docs" / "results.md").read_text().split())
    claim = (f"`rloo-s10` rerun at {check['rerun_commit'][:7]} gave the same correct count on each of the "
             f"{len(rerun['eval']['correct'])} problems as the committed unit ({sum(rerun['eval']['correct'])} of "
             f"{sum(rerun['eval']['scored'])})")  # fmt: skip
    assert check["status"] == "passed" and claim in results


def test_a_hand_edited_unit_is_refused_naming_it(assets):
    """A count above n (or not an integer) would index past the U-statistic tables: one line naming the unit."""
    path, _ = assets
    for bad in (17, 2.5, True):
        unit = json.loads((path / "compare_objectives" / "max8-s4.json").read_text())
        unit["eval"]["correct"][0] = bad
        (path / "compare_objectives" / "max8-s4.json").write_text(json.dumps(unit))
        with pytest.raises(ValueError, match=r"unit max8-s4: its correct counts are not 9 integers in \[0, 16\]"):
            objective_frontier.frontier(path)


def test_the_guide_claims_nothing_beyond_what_was_measured():
    """Issue 49 (F2, F5): the title and the table's rows at the strength of the evidence: no k above the samples per
    problem, no greedy decoding (every evaluation sampled), no k = 2 row where no arm bought anything at k = 2."""
    import yaml

    committed = json.loads((objective_frontier.ASSETS / "objective_frontier.json").read_text())
    guide = " ".join(objective_frontier.GUIDE.read_text().split())
    cfg = yaml.safe_load((REPO / "studies" / "configs" / "compare_objectives.yaml").read_text())
    assert "temperature" in cfg and cfg["temperature"] > 0  # every evaluation is sampled
    for phrase in ("train for the k you deploy", "pass@1, or greedy", "best of 8 or more", "best of 2-4", "small pass@8"):
        assert phrase not in guide, phrase
    assert f"pass@k up to k = {committed['num_samples']}, no further" in guide
    assert f"sampled at T = {cfg['temperature']}; greedy decoding was not measured" in guide
    main = committed["main_sets"]
    at2 = {e["set"]: e["pass@k"]["ci"][1] for e in committed["differences"]
           if e["set"] in (main["top2of4"], main["maxrl"]) and committed["sets"][e["minus"]]["arm"] == "rloo"}  # fmt: skip
    assert len(at2) == 2 and all(lo < 0 < hi for lo, hi in at2.values())  # nothing bought at k = 2
    assert "| best of 4 with a verifier |" in guide and "nothing detectable at k = 2" in guide


def test_a_panel_lists_only_its_own_reruns():
    """The `digits20` panel does not list `digits`' reruns as "not available" (their units are in other folders)."""
    units = {(src, name): u for src in objective_frontier.SOURCES
             for name, u in objective_frontier.load_units(objective_frontier.ASSETS / src).items()}  # fmt: skip
    own = objective_frontier.reproduction_checks(objective_frontier.ASSETS, units)
    assert own and all(c["status"] != "not available" for c in own)
    assert objective_frontier.reproduction_checks(objective_frontier.ASSETS, {}, ("compare_crossover",)) == []
