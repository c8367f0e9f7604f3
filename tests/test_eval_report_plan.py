"""The report's flags are parsed once into a frozen `ReportPlan` that every stage reads; each metric gets the
`(P, n)` input its `on` names and nothing else; report.md states one mean completion length, report.json's."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch
from helpers.eval_runs import adopt
from test_eval_pipeline import FAST, TOY

from ordergrad_trl.evaluation import layout, metrics, records, report_plan
from ordergrad_trl.evaluation.args import PathArgs, ReportArgs, ScoreArgs
from ordergrad_trl.evaluation.cli import command
from ordergrad_trl.evaluation.errors import UsageError
from ordergrad_trl.evaluation.metric_inputs import MetricInputs, compute_metric
from ordergrad_trl.evaluation.metrics import Metric
from ordergrad_trl.evaluation.report import report
from ordergrad_trl.evaluation.score import score

REF = ["--backend", "reference", "--reward_workers", "1", "--plot", "false", "--disable_tqdm", "--bootstrap_samples",
       "20"]


# -------------------------------------------------------------------------------------------------- one parse
@pytest.fixture
def parse_counts(monkeypatch) -> dict[str, int]:
    """How often each flag's parser runs."""
    counts = {"reward_weights": 0, "objectives": 0}
    for flag, name in (("reward_weights", "parse_reward_weights"), ("objectives", "parse_objective")):
        real = getattr(report_plan, name)

        def counted(*args, _real=real, _flag=flag, **kw):
            counts[_flag] += 1
            return _real(*args, **kw)

        monkeypatch.setattr(report_plan, name, counted)
    return counts


def test_each_report_flag_is_parsed_once_per_command(tmp_path, parse_counts, capsys):
    """`run` checks --objectives against --num_samples, generates, scores and reports: one parse of each flag (each
    --objectives entry once), read by every later stage."""
    out = tmp_path / "run"
    flags = ["--reward_weights", "correct=1,format=0.5", "--objectives", "TopM:2@2", "0.2,0.8",
             "--output_dir", str(out)]
    command(["run", *REF, "--datasets", "arithmetic", "--limit", "2", "--num_samples", "2", *flags])
    assert parse_counts == {"reward_weights": 1, "objectives": 2}
    capsys.readouterr()
    command(["report", "--plot", "false", "--bootstrap_samples", "20", *flags])
    assert parse_counts == {"reward_weights": 2, "objectives": 4}
    from ordergrad_trl.evaluation import evaluate

    rep = evaluate(generations=out, reward_weights="correct=1,format=0.5", objectives=["TopM:2@2"], plot=False,
                   bootstrap_samples=20, reward_workers=1)
    assert parse_counts == {"reward_weights": 3, "objectives": 5}
    assert list(rep["datasets"]["arithmetic"]["objectives"]) == ["TopM:2@2"]


def test_the_plan_is_typed_frozen_and_round_trips_to_the_flags():
    args = ReportArgs(ks=[4, 1], reward_weights="format=0.5, correct=2", cvar_q=0.5,
                      objectives=["TopM:2@4", "0.1,0,0.3,0.6", "median@8"], bootstrap_samples=7, bootstrap_seed=3,
                      ci_level=0.9, breakdown=["level"], plot=False)
    default = ReportArgs()
    assert all(getattr(args, f.name) != getattr(default, f.name) for f in dataclasses.fields(ReportArgs))  # each set
    plan = report_plan.plan_report(args)
    assert plan.ks == (4, 1) and plan.reward.terms == (("format", 0.5), ("correct", 2.0))
    assert [(o.objective, o.k, o.key) for o in plan.objectives] == [
        ("TopM:2", 4, "TopM:2@4"), ("0.1,0,0.3,0.6", 4, "0.1,0,0.3,0.6@4"), ("median", 8, "median@8")]
    assert plan.config == dataclasses.asdict(args)  # report.json's config is what was asked for
    assert report_plan.as_plan(plan) is plan
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.cvar_q = 0.25
    assert report_plan.plan_report(ReportArgs(reward_weights=" correct = 1 ")).reward.binary
    for weights in ("correct=1,format=0", "correct=2", "format=1"):
        assert not report_plan.plan_report(ReportArgs(reward_weights=weights)).reward.binary


@pytest.mark.parametrize(("settings", "want"), [
    (dict(reward_weights="correct=1,length=2"), f"--reward_weights must look like 'correct=1,format=0.2' (fields: "
                                                f"{', '.join(layout.REWARD_FIELDS)}), got 'correct=1,length=2'"),
    (dict(reward_weights="correct=1,correct=2"), "--reward_weights gives correct twice"),
    (dict(reward_weights="correct=x"), "--reward_weights: 'x' is not a number"),
    (dict(reward_weights="correct=inf"), "--reward_weights: the weight of correct must be a finite number"),
    (dict(reward_weights="correct=1e-9"), "--reward_weights: the weight of correct must be 0 or of magnitude in "
                                          "[1e-06, 1e+06]"),
    (dict(reward_weights="correct=0,format=0"), "--reward_weights: every weight is 0"),
    (dict(objectives=["TopM:2"]), "--objectives: entry 'TopM:2' needs '@K'"),
    (dict(objectives=["TopM:2@70000"]), "--objectives 'TopM:2@70000': K must be in [1, 65536], got 70000"),
    (dict(objectives=["Bogus@4"]), "--objectives 'Bogus@4': Invalid objective"),
    (dict(ks=[]), "--ks must be integers >= 1"),
    (dict(cvar_q=0.0), "--cvar_q must be in [1e-06, 1], got 0.0"),
])
def test_a_bad_report_flag_is_one_line_naming_it(settings, want):
    with pytest.raises(UsageError) as err:
        report_plan.plan_report(ReportArgs(**settings))
    msg = str(err.value)
    assert want in msg and "\n" not in msg
    with pytest.raises(UsageError) as err:  # from Python, the call is named
        report_plan.plan_report(ReportArgs(**settings), "evaluate(): ")
    assert str(err.value).startswith("evaluate(): --")


def test_an_objective_spelled_as_a_metric_key_or_given_twice_is_refused():
    """`median@4` beside a metric keyed `median@{k}` would be two columns under one key (compare's tables and
    `--metrics`, report.md's rows): refused at the parse, as is an entry given twice; another spelling is kept."""
    median = dataclasses.replace(metrics.METRICS["best"], name="median", key="median@{k}")
    with metrics._ROWS.registered("median", median), pytest.raises(  # a metric a user registers, for the test only
            UsageError, match=r"--objectives 'median@4' is spelled as the key of the metric 'median'"):
        report_plan.plan_report(ReportArgs(objectives=["median@4"]))
    with pytest.raises(UsageError, match=r"--objectives gives 'TopM:2@4' twice"):
        report_plan.plan_report(ReportArgs(objectives=["TopM:2@4", "TopM:2@4"]))
    assert [o.key for o in report_plan.plan_report(ReportArgs(objectives=["Median@4"])).objectives] == ["Median@4"]


def test_the_valid_reward_fields_are_the_score_rows_numeric_fields():
    """`REWARD_FIELDS` names fields of a score row that hold numbers (or null), and every one can be weighed."""
    schema = layout.SCHEMAS["scores"]
    for name in layout.REWARD_FIELDS:
        check, _ = schema[name]
        assert check(0.0) and check(1.0) and check(None) and not check("x")
        assert report_plan.parse_reward_weights(f"{name}=2").terms == ((name, 2.0),)


# ------------------------------------------------------------------------------------------------ metric inputs
def random_inputs(num_p=5, n=6, seed=0) -> MetricInputs:
    g = torch.Generator().manual_seed(seed)
    correct = (torch.rand(num_p, n, generator=g) < 0.5).double()
    correct[0, 1] = math.nan  # a missing sample
    reward = correct + 0.3 * torch.rand(num_p, n, generator=g, dtype=torch.float64)
    labels = torch.randint(-1, 3, (num_p, n), generator=g)
    return MetricInputs(correct, reward, labels)


@pytest.mark.parametrize("name", list(metrics.METRICS))
def test_every_metric_depends_only_on_the_input_it_declares(name):
    """Replacing the input a metric does not declare changes nothing, bitwise; reading it is refused."""
    metric, base = metrics.METRICS[name], random_inputs()
    other = random_inputs(seed=1)
    swapped = MetricInputs(**{f: getattr(base if f in (metric.on, "labels") else other, f)
                              for f in ("correct", "reward", "labels")})
    config = {"cvar_q": 0.5}
    for k in (1, 3, 6) if metric.per_k else (None,):
        a, b = compute_metric(metric, base, k, config), compute_metric(metric, swapped, k, config)
        assert a.shape == (5,) and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def test_a_metric_reading_an_input_it_does_not_declare_is_an_error():
    def fields(on, fn, **kw):
        return Metric(name="m", key="m@{k}", label="m", on=on, unit="reward", compute=fn, definition="", as_lstat="",
                      **kw)

    inputs = random_inputs()
    wrong = fields("correct", lambda x, k, c: metrics.best_of_k(x["reward"], k))
    with pytest.raises(ValueError, match=r"metric 'm' is declared on='correct' but reads 'reward'.*declare "
                                         r"on='reward'"):
        compute_metric(wrong, inputs, 2, {})
    right = fields("reward", lambda x, k, c: metrics.best_of_k(x["reward"], k))
    assert torch.equal(compute_metric(right, inputs, 2, {}), metrics.best_of_k(inputs.reward, 2))
    with pytest.raises(KeyError, match="no input 'tokens'"):
        compute_metric(fields("reward", lambda x, k, c: x["tokens"]), inputs, 2, {})
    with pytest.raises(ValueError, match=r"must return one value per problem, shape \(5,\), got \(5, 6\)"):
        compute_metric(fields("reward", lambda x, k, c: x["reward"]), inputs, 2, {})
    assert set(inputs.for_metric("m", "correct")) == {"correct", "labels"}


@pytest.mark.parametrize(("change", "match"), [
    (dict(reward=torch.zeros(5, 5, dtype=torch.float64)), r"reward must be a \(problems, samples\) tensor"),
    (dict(labels=torch.zeros(5, 6)), "labels must be int64"),
    (dict(correct=torch.full((5, 6), 0.5, dtype=torch.float64)), "correct must hold 0, 1 or NaN"),
    (dict(correct=torch.zeros(5, 6, dtype=torch.float32)), "correct must be float64"),
    (dict(reward=torch.full((5, 6), math.inf, dtype=torch.float64)), "reward must be finite or NaN"),
])
def test_metric_inputs_are_checked(change, match):
    base = random_inputs()
    with pytest.raises(ValueError, match=match):
        MetricInputs(**{**{f: getattr(base, f) for f in ("correct", "reward", "labels")}, **change})


# ------------------------------------------------------------------------------------------------ completion length
def test_one_mean_completion_length_over_every_generated_sample(tmp_path):
    """The mean of num_tokens over every generated sample, those of a problem whose gold does not parse too (they
    were generated at the same cost), in report.json and, with the same value, once in report.md; the truncated
    share over the same samples."""
    d = tmp_path / "toy"
    d.mkdir()
    records.write_jsonl_atomic(d / "problems.jsonl", [
        {"id": pid, "answer": gold, "prompt": [{"role": "user", "content": pid}]} for pid, (gold, _) in TOY.items()])
    gens = [{"id": pid, "sample": s, "completion": text, "num_tokens": 1000 if pid == "p4" else 10 + s,
             "finish_reason": "length" if pid == "p4" or s == 0 else "stop"}
            for pid, (_, rows) in TOY.items() for s, (text, _, _) in enumerate(rows)]
    records.append_jsonl(d / "generations.jsonl", gens)
    adopt(tmp_path)
    paths = PathArgs(str(tmp_path))
    score(ScoreArgs(reward_workers=1), paths)
    ds = report(ReportArgs(**FAST), paths)["datasets"]["toy"]
    assert ds["unscorable_problems"] == 1  # p4: its 6 samples score nothing, yet count for the length
    want = sum(g["num_tokens"] for g in gens) / len(gens)
    assert ds["mean_completion_tokens"] == pytest.approx(want) and want == pytest.approx((4 * 75 + 6000) / 30)
    assert ds["truncated_fraction"] == pytest.approx((6 + 4) / 30)
    md = (tmp_path / "report.md").read_text()
    assert len(re.findall(r"mean completion", md, flags=re.IGNORECASE)) == 1
    assert f"mean completion tokens {want:.1f} (over all samples), 33% truncated at max_new_tokens" in md
