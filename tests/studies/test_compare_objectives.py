"""studies/compare_objectives.py: curves against closed forms, the bootstrap summary, and a tiny end-to-end run."""

import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import compare_summary  # noqa: E402
from helpers.docs_commands import documented_commands  # noqa: E402
from helpers import bounded  # noqa: E402


# Arms as the recipe passes them (K=5 for best-of-K so that small groups cover it), with their rank weights in
# ascending order, written out by hand for the brute-force oracle.
ARM_FLAGS = {
    "grpo": ["--ordergrad_estimator", "grpo", "--scale_rewards", "group"],
    "rloo": ["--ordergrad_objective", "Mean", "--ordergrad_k", "1"],
    "max5": ["--ordergrad_objective", "ReMax", "--ordergrad_k", "5"],
    "top2of4": ["--ordergrad_objective", "TopM:2", "--ordergrad_k", "4"],
    "min4": ["--ordergrad_objective", "ReMin", "--ordergrad_k", "4"],
    "maxrl": ["--ordergrad_estimator", "maxrl"],
    "curverl": ["--ordergrad_estimator", "grpo", "--scale_rewards", "none", "--ordergrad_prompt_weight", "curverl"],
}
ASCENDING_WEIGHTS = {"rloo": [1.0], "max5": [0, 0, 0, 0, 1.0], "top2of4": [0, 0, 0.5, 0.5], "min4": [1.0, 0, 0, 0]}


def test_curves_match_closed_forms():
    n = 16
    correct = torch.arange(n + 1)  # every possible count
    per = compare_summary.curves(correct, n)
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert per["pass@k"][c, k - 1].item() == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
            assert per["pass^k"][c, k - 1].item() == pytest.approx(math.comb(c, k) / math.comb(n, k), abs=1e-12)


def _unit(unit, correct, n, steps=()):
    arm, _, seed = unit.partition("-s")
    return {
        "schema": 1, "unit": unit, "arm": arm, "seed": int(seed) if seed else None, "num_samples": n,
        "train_log": [{"step": i + 1, "reward": r} for i, r in enumerate(steps)], "wall_s": 1.0,
        "eval": {"problem_ids": [f"p{i}" for i in range(len(correct))], "correct": correct, "scored": [n] * len(correct)},
    }  # fmt: skip


def test_summary_values_cis_and_paired_differences(tmp_path):
    n, gen = 8, torch.Generator().manual_seed(0)
    assets = tmp_path / "units"
    assets.mkdir()
    counts = {u: torch.randint(0, n + 1, (30,), generator=gen).tolist() for u in ("base", "rloo-s0", "rloo-s1")}
    counts["grpo-s0"], counts["grpo-s1"] = counts["rloo-s0"], counts["rloo-s1"]  # identical arms: difference 0
    for unit, c in counts.items():
        (assets / f"{unit}.json").write_text(json.dumps(_unit(unit, c, n, steps=() if unit == "base" else (0.1, 0.2))))
    summary = compare_summary.summarize(assets, ["grpo", "rloo"])
    rloo = summary["arms"]["rloo"]
    # value: mean over seeds and problems of the closed form
    k = 4
    expected = sum(1 - math.comb(n - c, k) / math.comb(n, k) for u in ("rloo-s0", "rloo-s1") for c in counts[u]) / 60
    assert rloo["pass@k"]["value"][k - 1] == pytest.approx(expected, abs=1e-12)
    lo, hi = rloo["pass@k"]["ci"][k - 1]
    assert lo < expected < hi
    assert rloo["minus_grpo"]["pass@k"]["ci"][k - 1] == [0.0, 0.0]  # paired resampling of the same problems
    assert summary["arms"]["grpo"]["minus_rloo"]["pass^k"]["ci"][k - 1] == [0.0, 0.0]
    base_gap = summary["arms"]["base"]["pass@k"]["value"][k - 1] - rloo["pass@k"]["value"][k - 1]
    assert summary["arms"]["base"]["minus_rloo"]["pass@k"]["value"][k - 1] == pytest.approx(base_gap, abs=1e-12)
    assert rloo["train_reward"]["mean"] == pytest.approx([0.1, 0.2])
    for name in ("compare_objectives.json", "compare_objectives.md"):
        assert not (tmp_path / name).exists()  # outputs are named after the folder
    md = (tmp_path / "units.md").read_text()
    assert (tmp_path / "units.json").exists() and "| rloo | 2 |" in md
    assert "Differences vs GRPO" in md and "Differences vs RLOO" in md
    # per-seed row: each seed's pass@1 is its mean success rate, in seed order
    per_seed = " / ".join(f"{100 * sum(counts[u]) / (30 * n):.1f}" for u in ("rloo-s0", "rloo-s1"))
    assert f"| rloo | 0, 1 | {per_seed} |" in md


def test_summary_refuses_mismatched_units(tmp_path):
    assets = tmp_path / "units"
    assets.mkdir()
    (assets / "grpo-s0.json").write_text(json.dumps(_unit("grpo-s0", [1, 2], 4)))
    (assets / "rloo-s0.json").write_text(json.dumps(_unit("rloo-s0", [1, 2, 3], 4)))
    with pytest.raises(ValueError, match="other problems or samples"):
        compare_summary.summarize(assets, ["grpo", "rloo"])


def test_summary_refuses_units_from_another_protocol(tmp_path):
    assets = tmp_path / "units"
    assets.mkdir()
    for unit, steps in (("grpo-s0", 20), ("rloo-s0", 30)):  # rloo-s0 ran under an older config
        (assets / f"{unit}.json").write_text(json.dumps({**_unit(unit, [1, 2], 4), "config": {"max_steps": steps}}))
    with pytest.raises(ValueError, match="delete the stale unit's JSON"):
        compare_summary.summarize(assets, ["grpo", "rloo"])
    # the base model only has to share the eval settings
    base = {**_unit("base", [1, 2], 4), "config": {"max_steps": 20, "temperature": 0.7}}
    (assets / "rloo-s0.json").unlink()
    (assets / "base.json").write_text(json.dumps(base))
    (assets / "grpo-s0.json").write_text(json.dumps({**_unit("grpo-s0", [1, 2], 4), "config": {"temperature": 0.7}}))
    assert set(compare_summary.summarize(assets, ["grpo"])["arms"]) == {"base", "grpo"}


def documented() -> list:
    """The docs' command that runs the comparison (tests/helpers/docs_commands.py); the smoke test below runs it
    shrunk."""
    return [c for c in documented_commands() if not c.inline and c.argv == ("python", "studies/compare_objectives.py")]


@pytest.mark.slow  # 138 s on a 2-core CPU
def test_comparison_smoke_end_to_end_and_resume(tiny_model_dir, tmp_path):
    assets, work = tmp_path / "cmp", tmp_path / "work"
    (command,) = documented()
    composed = "max8cv=--ordergrad_objective ReMax --ordergrad_k 8 --ordergrad_prompt_weight curverl"
    cmd = [sys.executable, str(REPO / command.argv[1]), "--smoke", "--arm", composed, "--arms", "max8", "maxrl",
           "max8cv", "--seeds", "0", "--model_name_or_path", str(tiny_model_dir), "--threads", "1",
           "--assets_dir", str(assets), "--work_dir", str(work)]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    result = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    units = {p.stem: json.loads(p.read_text()) for p in assets.glob("*.json")}
    assert set(units) == {"base", "max8-s0", "maxrl-s0", "max8cv-s0"}  # maxrl: the estimator arm (issue 29)
    for unit in units.values():
        assert unit["schema"] == 1 and unit["num_samples"] == 4 and len(unit["eval"]["correct"]) == 2
    assert [row["step"] for row in units["max8-s0"]["train_log"]] == [1]
    assert units["max8cv-s0"]["train_flags"] == composed.split("=", 1)[1].split()  # the unit says what trained it
    assert units["maxrl-s0"]["train_flags"] == ["--ordergrad_estimator", "maxrl"] and units["base"]["train_flags"] is None
    # a unit reruns from its own record: the recipe's command and the eval's flags, seed, backend and versions
    record = units["max8cv-s0"]
    command = record["train_command"]
    assert command[:2] == ["-m", "accelerate.commands.launch"] and "--output_dir" not in command
    assert " ".join(record["train_flags"] + record["train_overrides"]) in " ".join(command)
    assert record["eval_seed"] == 0 and ["--seed", "0"] == record["eval_args"][record["eval_args"].index("--seed"):][:2]
    assert record["eval_backend"] == ("vllm" if importlib.util.find_spec("vllm") else "hf")
    assert ["--backend", record["eval_backend"]] == record["eval_args"][record["eval_args"].index("--backend"):][:2]
    assert set(record["versions"]) == {"torch", "transformers", "trl", "accelerate", "vllm"}
    assert record["versions"]["torch"] == torch.__version__ and units["base"]["train_command"] is None
    assert record["train_wall_s"] + record["eval_wall_s"] <= record["wall_s"] + 1
    prompt_weight = json.loads((work / "max8cv-s0" / "model" / "ordergrad_resolved_config.json").read_text())
    assert prompt_weight["ordergrad_plan"]["prompt_weight"] == {"weight": "curverl", "window": 10}
    summary = json.loads((tmp_path / "cmp.json").read_text())
    assert set(summary["arms"]) == {"base", "max8", "maxrl", "max8cv"} and summary["ks"] == [1, 2, 3, 4]
    assert set(summary["group_weights"]["arms"]) == {"max8", "maxrl", "max8cv"}  # each arm's recipe flags
    assert (tmp_path / "cmp.md").exists()
    # resume: nothing left to run, so a rerun only summarizes; a later --summarize reads the defined arm's flags back
    again = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0 and "4 of 4 units done; running []" in again.stdout
    (tmp_path / "cmp.json").unlink()
    summarized = bounded.run([*cmd[:2], "--summarize", "--assets_dir", str(assets)], env=env, capture_output=True,
                             text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert summarized.returncode == 0, summarized.stderr[-3000:]
    assert "max8cv" in json.loads((tmp_path / "cmp.json").read_text())["group_weights"]["arms"]
    # a unit interrupted after training (its JSON absent, its model saved) resumes at the evaluation
    (assets / "max8-s0.json").unlink()
    third = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert "[max8-s0] reusing the trained model" in third.stdout
    resumed = json.loads((assets / "max8-s0.json").read_text())
    assert resumed["train_log"] == units["max8-s0"]["train_log"] and resumed["eval"] == units["max8-s0"]["eval"]


def test_summary_of_the_base_model_alone(tmp_path):
    # the base unit finishes first: its curves are reported before any arm has trained
    assets = tmp_path / "units"
    assets.mkdir()
    (assets / "base.json").write_text(json.dumps(_unit("base", [1, 3], 4)))
    summary = compare_summary.summarize(assets, ["grpo"])
    assert list(summary["arms"]) == ["base"]
    assert summary["arms"]["base"]["pass^k"]["value"][1] == pytest.approx((0 + 3 / 6) / 2)  # C(c,2)/C(4,2)
    assert "Differences" not in (tmp_path / "units.md").read_text()


def test_group_weights_match_brute_force_advantages():
    # each arm's success-minus-failure advantage gap per success count, from subset enumeration
    # (tests/helpers/oracle.py)
    from helpers.oracle import brute_advantage

    n = 7
    arms = ARM_FLAGS
    ascending = ASCENDING_WEIGHTS
    got = compare_summary.group_weights(arms, n)
    for arm in arms:
        gaps = [0.0]
        for c in range(1, n):
            group = [0.0] * (n - c) + [1.0] * c
            if arm == "grpo":
                mean = c / n
                std = math.sqrt(sum((x - mean) ** 2 for x in group) / (n - 1))
                gaps.append(1 / (std + 1e-4))  # TRL's scale_rewards: advantages / (std + 1e-4)
            elif arm == "maxrl":  # (r - mean) / mean: a success gets (1 - c/n) / (c/n), a failure -1
                gaps.append(n / c)
            elif arm == "curverl":  # the n-1 counts fill bins 1..n-1 once: mass / cdf = 1 / c, times r - mean
                gaps.append(1 / c)
            else:
                adv = brute_advantage(group, ascending[arm])
                gaps.append(adv[-1] - adv[0])
        gaps.append(0.0)
        top = max(gaps)
        assert got[arm] == pytest.approx([g / top for g in gaps], abs=1e-12), arm
    # the shapes the comparison's reading rests on: best-of-K weights hard prompts, worst-of-K easy ones
    assert got["max5"][1] == 1 and got["max5"][n - 1] == pytest.approx(0, abs=1e-12)
    assert got["min4"][n - 1] == 1 and got["min4"][1] == pytest.approx(0, abs=1e-12)


def test_objective_values_match_subset_enumeration():
    # each arm's objective on a problem with c correct of n: the mean over all K-subsets of the samples (oracle)
    from helpers.oracle import brute_value

    n = 9
    arms = ARM_FLAGS
    specs = compare_summary.objective_specs(arms, n)  # groups of n rollouts in training
    assert specs["grpo"] == specs["rloo"] == ("Mean", 1)  # GRPO targets the expected reward too
    assert specs["maxrl"] == (f"MaxRL:{n - 1}", n - 1)  # MaxRL's estimator: unbiased for sum_{k<n} pass@k / k
    objectives = [specs[a] for a in ("rloo", "max5", "top2of4", "min4")]
    ascending = [ASCENDING_WEIGHTS[a] for a in ("rloo", "max5", "top2of4", "min4")]
    got = compare_summary.objective_values(torch.arange(n + 1), n, objectives + [specs["maxrl"]])  # (n+1, 5)
    for c in range(n + 1):
        group = [0.0] * (n - c) + [1.0] * c
        for j, w in enumerate(ascending):
            assert got[c, j].item() == pytest.approx(brute_value(group, w), abs=1e-12), (c, objectives[j])
        j_t = sum((1 - math.comb(n - c, k) / math.comb(n, k)) / k for k in range(1, n))  # sum_{k<n} pass@k / k
        assert got[c, 4].item() == pytest.approx(j_t, abs=1e-12), c


def test_summary_objectives_table(tmp_path):
    # the matrix of objectives x models: columns deduplicated (GRPO and RLOO share the mean), a K above the
    # eval's n left out, each cell the mean of the per-problem oracle values
    from helpers.oracle import brute_value

    n, gen = 6, torch.Generator().manual_seed(1)
    assets = tmp_path / "units"
    assets.mkdir()
    counts = {u: torch.randint(0, n + 1, (12,), generator=gen).tolist() for u in ("rloo-s0", "grpo-s0", "min4-s0")}
    for unit, c in counts.items():
        (assets / f"{unit}.json").write_text(json.dumps(_unit(unit, c, n, steps=(0.5,))))
    arms = {
        "grpo": ["--ordergrad_estimator", "grpo"],
        "rloo": ["--ordergrad_objective", "Mean", "--ordergrad_k", "1"],
        "max8": ["--ordergrad_objective", "ReMax", "--ordergrad_k", "8"],
        "min4": ["--ordergrad_objective", "ReMin", "--ordergrad_k", "4"],
    }
    summary = compare_summary.summarize(assets, list(arms), arm_flags=arms)
    assert summary["objectives"] == [{"name": "Mean@1", "trained_by": ["grpo", "rloo"]},
                                     {"name": "ReMin@4", "trained_by": ["min4"]}]  # fmt: skip
    worst4 = [1.0, 0, 0, 0]
    for unit, arm in (("min4-s0", "min4"), ("rloo-s0", "rloo")):
        expected = sum(brute_value([0.0] * (n - c) + [1.0] * c, worst4) for c in counts[unit]) / len(counts[unit])
        assert summary["arms"][arm]["objectives"]["value"][1] == pytest.approx(expected, abs=1e-12)
    diff = summary["arms"]["min4"]["minus_rloo"]["objectives"]["value"][1]
    rloo, min4 = (summary["arms"][a]["objectives"]["value"][1] for a in ("rloo", "min4"))
    assert diff == pytest.approx(min4 - rloo, abs=1e-12)
    md = (tmp_path / "units.md").read_text()
    assert "| model | seeds | Mean@1 (grpo, rloo) | ReMin@4 (min4) |" in md and "| min4 - rloo | 1 |" in md


def test_seed_level_primaries_against_scipy(tmp_path):
    """The pre-registered analysis on a fixture: per-seed paired differences of each arm's own objective, a t test
    over seeds (scipy's paired t test as the oracle), Holm over the primaries, pairing by seed id when arms have
    different seeds (min4 lacks seed 3; grpo has only seeds 0-1 and is no primary: its objective is the mean)."""
    scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (the dev extra) is the independent oracle")
    from helpers.oracle import brute_value

    n, gen = 6, torch.Generator().manual_seed(3)
    assets = tmp_path / "units"
    assets.mkdir()
    seeds = {"rloo": [0, 1, 2, 3], "max5": [0, 1, 2, 3], "min4": [0, 1, 2], "grpo": [0, 1]}
    counts = {f"{a}-s{s}": torch.randint(0, n + 1, (10,), generator=gen).tolist() for a, ss in seeds.items() for s in ss}
    for unit, c in counts.items():
        (assets / f"{unit}.json").write_text(json.dumps(_unit(unit, c, n, steps=(0.5,))))
    arms = {a: ARM_FLAGS[a] for a in seeds}
    sl = compare_summary.summarize(assets, list(arms), arm_flags=arms)["seed_level"]

    def objective(unit, arm):  # the arm's own objective, mean over problems, by subset enumeration
        w = ASCENDING_WEIGHTS[arm]
        return sum(brute_value([0.0] * (n - c) + [1.0] * c, w) for c in counts[unit]) / len(counts[unit])

    assert [e["arm"] for e in sl["primaries"]] == ["max5", "min4"]
    ps = []
    for e in sl["primaries"]:
        arm = e["arm"]
        common = [s for s in seeds[arm] if s in seeds["rloo"]]
        a = [objective(f"{arm}-s{s}", arm) for s in common]
        b = [objective(f"rloo-s{s}", arm) for s in common]
        ref = scipy_stats.ttest_rel(a, b)
        ci = ref.confidence_interval(0.95)
        assert e["seeds"] == common
        assert e["per_seed"] == pytest.approx([x - y for x, y in zip(a, b)], abs=1e-12)
        assert e["p"] == pytest.approx(ref.pvalue, rel=1e-9)
        assert e["ci"] == pytest.approx([ci.low, ci.high], rel=1e-9, abs=1e-12)
        ps.append(ref.pvalue)
    low, high = sorted(ps)
    holm = {low: min(1, 2 * low), high: max(min(1, 2 * low), high)}  # Holm for two hypotheses, by hand
    assert [e["p_holm"] for e in sl["primaries"]] == pytest.approx([holm[p] for p in ps], rel=1e-9)
    assert set(sl["exploratory"]) == {"grpo", "max5", "min4"} and sl["exploratory"]["grpo"]["seeds"] == [0, 1]
    md = (tmp_path / "units.md").read_text()
    assert "| max5 | ReMax@5 | 4 |" in md and "| min4 | ReMin@4 | 3 |" in md


def test_new_seeds_ran_at_the_preregistered_commit():
    """Seeds 3-9 of the four pre-registered arms were all measured by the commit that holds their pre-registration;
    GRPO's seeds 3-9 and the replication's rloo and max8 units (seeds 10-24) at 9fd3a65; the exploratory maxrl
    units at 6f46570, the commit that added the arm."""
    assets = REPO / "studies" / "assets"
    units = sorted(p for p in (assets / "compare_objectives").glob("*-s[3-9].json") if not p.name.startswith("grpo"))
    commits = {json.loads(path.read_text())["commit"] for path in units}
    assert len(units) == 28 and len(commits) == 1, (len(units), commits)
    prereg = commits.pop()
    assert not prereg.endswith("+dirty")
    assert "34dbfb7" in (REPO / "docs" / "results.md").read_text() and prereg.startswith("34dbfb7")
    grpo = sorted((assets / "compare_objectives").glob("grpo-s[3-9].json"))
    assert [p.name for p in grpo] == [f"grpo-s{s}.json" for s in range(3, 10)]  # all seven, so no 3/10-seed mix
    replication = assets / "compare_objectives_replication"
    at_commit = {"9fd3a65": [*grpo, *replication.glob("rloo-s*.json"), *replication.glob("max8-s*.json")],
                 "6f46570": list(replication.glob("maxrl-s*.json"))}  # fmt: skip
    for expected, paths in at_commit.items():
        for path in paths:
            commit = json.loads(path.read_text())["commit"]
            assert commit.startswith(expected) and not commit.endswith("+dirty"), (path.name, commit)


def test_a_finished_run_of_some_arms_leaves_the_published_summary_as_it_is(tmp_path):
    """The docstring's ten-seed command, once every unit is in, writes the summary `--summarize` writes: the summary
    covers every finished unit, not only the arms and seeds of the command line (cwd elsewhere)."""
    ten_seed = "--arms rloo max8 min4 top2of4 --seeds 3 4 5 6 7 8 9"
    assert ten_seed in (REPO / "studies" / "compare_objectives.py").read_text()
    published = REPO / "studies" / "assets"
    assets = tmp_path / "compare_objectives"
    assets.mkdir()
    for unit in (published / "compare_objectives").glob("*.json"):
        (assets / unit.name).write_bytes(unit.read_bytes())
    cmd = [sys.executable, str(REPO / "studies" / "compare_objectives.py"), *ten_seed.split(),
           "--assets_dir", str(assets)]  # fmt: skip
    result = bounded.run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0 and "running []" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    from test_published_results import _same  # floats to 1e-12: a reduction's last bit differs between CPUs

    assert (tmp_path / "compare_objectives.md").read_bytes() == (published / "compare_objectives.md").read_bytes()
    assert _same(*(json.loads((d / "compare_objectives.json").read_text()) for d in (tmp_path, published)))


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("max8", "write NAME=FLAGS"),
        ("Max8=--ordergrad_k 8", "write NAME=FLAGS"),
        ("max8=--ordergrad_k 8", "'max8' is a built-in arm"),
        ("x=--learning_rate 1", "an arm cannot set --learning_rate"),
        ("x=--ordergrad_k", "'--flag value' pairs"),
        ("x=--ordergrad_objective ReMax --ordergrad_k 16", "ordergrad_k (16) must be smaller than num_generations (16)"),
        ("x=--ordergrad_prompt_weight hazard", "ordergrad_prompt_weight='hazard' is unknown"),
        ("x=--ordergrad_prompt_weight curverl --ordergrad_prompt_weight_window two", "invalid int value: 'two'"),
    ],
)  # fmt: skip
def test_a_defined_arm_is_checked_when_given(spec, needle):
    """`--arm NAME=FLAGS` fails before any unit runs, naming what is wrong (the plan's own text for a bad setting)."""
    import compare_objectives  # studies/, on sys.path above

    with pytest.raises(ValueError) as info:
        compare_objectives.defined_arm(spec, 16)
    assert needle in str(info.value)
    name, flags = compare_objectives.defined_arm("a_1=--ordergrad_estimator grpo --ordergrad_prompt_weight inverse", 16)
    assert (name, flags) == ("a_1", ["--ordergrad_estimator", "grpo", "--ordergrad_prompt_weight", "inverse"])


def test_curverl_arm_is_curverl_as_published():
    import compare_objectives  # studies/, on sys.path above

    plan = compare_summary.plan_of_flags(compare_objectives.ARMS["curverl"], 16)
    assert (plan.estimator, plan.scale, str(plan.prompt_weight), plan.prompt_weight.window) == (
        "grpo", "none", "curverl", 10)


def test_units_of_two_eval_backends_are_not_summarized_together(tmp_path):
    assets = tmp_path / "units"
    assets.mkdir()
    for unit, backend in (("rloo-s0", None), ("max8-s0", "vllm")):  # a unit from before the backend was recorded: hf
        record = {**_unit(unit, [1, 2], 4), "config": {"temperature": 0.7}}
        (assets / f"{unit}.json").write_text(json.dumps(record if backend is None else {**record, "eval_backend": backend}))
    with pytest.raises(ValueError, match=r"different backends \{'max8-s0': 'vllm', 'rloo-s0': 'hf'\}"):
        compare_summary.summarize(assets, ["rloo", "max8"])


def test_auto_eval_backend_follows_the_units_already_there(tmp_path):
    import compare_objectives  # studies/, on sys.path above

    fresh = "vllm" if importlib.util.find_spec("vllm") else "hf"
    assert compare_objectives.eval_backend("auto", tmp_path / "none") == fresh
    assert compare_objectives.eval_backend("hf", tmp_path) == "hf"
    (tmp_path / "rloo-s0.json").write_text(json.dumps(_unit("rloo-s0", [1], 4)))  # recorded before backends were: hf
    assert compare_objectives.eval_backend("auto", tmp_path) == "hf"
    (tmp_path / "rloo-s0.json").write_text(json.dumps({**_unit("rloo-s0", [1], 4), "eval_backend": "vllm"}))
    assert compare_objectives.eval_backend("auto", tmp_path) == "vllm"
    assert "curverl" not in compare_objectives.DEFAULT_ARMS  # runs when named: the studies' folders keep their arms
