"""The metric table (`evaluation.metrics.METRICS`): report.json, report.md, the breakdown and the docs come from it;
every requested `--objectives` entry is reported in its own section and shown in report.md."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from test_eval_metrics import subsets_mean
from test_eval_pipeline import FAST, TOY, write_toy_run

from ordergrad_trl.core.objectives import PRESETS
from ordergrad_trl.evaluation import metrics
from ordergrad_trl.evaluation.args import PathArgs, ReportArgs, ScoreArgs
from ordergrad_trl.evaluation.report import report
from ordergrad_trl.evaluation.score import score

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> PathArgs:
    out = tmp_path_factory.mktemp("toy")
    write_toy_run(out)
    paths = PathArgs(str(out))
    score(ScoreArgs(reward_workers=1), paths)
    return paths


def mixed_case(text: str) -> str:
    """'LowerTailMean:0.5' -> 'lOwErTaIlMeAn:0.5': preset names ignore case."""
    return "".join(c.upper() if i % 2 else c.lower() for i, c in enumerate(text))


def objective_specs() -> list[str]:
    """Every preset name and alias of the preset registry, in mixed and in lower case, at K = 4 (valid for each
    example)."""
    specs = []
    for p in PRESETS.values():
        param = p.example.partition(":")[2]
        for name in (p.name, *p.aliases):
            written = (f"{name}:{param}" if param else name) + "@4"
            specs += [mixed_case(written), written.lower()]  # "cvar:0.5@4" was once dropped from report.md
    return specs


def brute_objective(spec: str, rewards: list[float]) -> float:
    """The objective by enumerating every 4-subset: the weights of the (lower-cased) preset on the sorted subset."""
    from ordergrad_trl import rank_weights

    obj, _, k = spec.rpartition("@")
    w = rank_weights(obj.lower(), int(k)).tolist()
    return subsets_mean(rewards, int(k), lambda s: sum(a * b for a, b in zip(w, sorted(s))))


@pytest.mark.parametrize("spec", objective_specs())
def test_every_requested_objective_is_reported_and_shown(toy_run, spec):
    rep = report(ReportArgs(ks=[1, 4], objectives=[spec], reward_weights="correct=1,format=0.5", **FAST), toy_run)
    ds = rep["datasets"]["toy"]
    assert list(ds["objectives"]) == [spec] and spec not in ds["metrics"]  # its own section, keyed as written
    scorable = [rows for _, rows in TOY.values() if rows[0][1] is not None]
    want = sum(brute_objective(spec, [c + 0.5 * (r"\boxed" in t) for t, c, _ in rows]) for rows in scorable)
    assert ds["objectives"][spec]["value"] == pytest.approx(want / len(scorable), abs=1e-12)
    md = (Path(toy_run.output_dir) / "report.md").read_text()
    value = ds["objectives"][spec]
    assert f"| {spec} | {value['value']:.3f} [{value['ci'][0]:.3f}, {value['ci'][1]:.3f}] |" in md
    for g in ds["breakdown"]["level"].values():
        assert list(g["objectives"]) == [spec]


@pytest.mark.parametrize("reward_weights", ["correct=1", "correct=1,format=0.5"])
def test_every_metric_of_the_table_is_reported_where_it_says(toy_run, reward_weights):
    ks = [1, 2, 6]
    args = ReportArgs(ks=ks, cvar_q=0.5, reward_weights=reward_weights, **FAST)
    ds = report(args, toy_run)["datasets"]["toy"]
    md = (Path(toy_run.output_dir) / "report.md").read_text()
    binary = reward_weights == "correct=1"
    config = {"cvar_q": 0.5}
    keys = [m.key_at(k, config) for m in metrics.METRICS.values() for k in (ks if m.per_k else (None,))]
    assert list(ds["metrics"]) == keys and ds["objectives"] == {}
    assert "cvar0.5@6" in keys and "mean_reward" in keys
    labels = re.findall(r"^\| ([^|]+?) \|", md, flags=re.MULTILINE)
    header = next(line for line in md.splitlines() if line.startswith("| level | problems |"))
    for m in metrics.METRICS.values():
        label = m.label_at(config)
        assert (label in labels) == ("table" in m.shows and m.visible(binary)), label
        for which in m.breakdown_ks:
            col = m.key_at({"first": ks[0], "last": ks[-1]}[which], config)
            assert (f" {col} |" in header) == ("breakdown" in m.shows and m.visible(binary)), col
    assert ("CVaR0.5@k (reward)" in labels) and (("best@k (reward)" in labels) != binary)
    # 0/1 reward: best@k is pass@k and is not shown twice; the values agree
    if binary:
        for k in ks:
            assert ds["metrics"][f"best@{k}"]["value"] == pytest.approx(ds["metrics"][f"pass@{k}"]["value"])


def test_worst_of_k_matches_brute_force(toy_run):
    ds = report(ReportArgs(ks=[1, 3, 6], reward_weights="correct=1,format=0.5", **FAST), toy_run)["datasets"]["toy"]
    scorable = [rows for _, rows in TOY.values() if rows[0][1] is not None]
    for k in (1, 3, 6):
        want = sum(subsets_mean([c + 0.5 * (r"\boxed" in t) for t, c, _ in rows], k, min) for rows in scorable)
        assert ds["metrics"][f"worst@{k}"]["value"] == pytest.approx(want / len(scorable), abs=1e-12)


def docs_metric_example() -> str:
    """The metric definition docs/development.md shows, as written there (pasted at the end of metrics.py, it runs in
    that module's namespace)."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "development.md").read_text()
    section = page.split("## Adding an eval metric")[1]
    return section.split("```python\n")[1].split("```")[0]


def test_a_new_metric_is_one_definition(toy_run):
    """Registering a metric puts it in report.json, report.md's table, the breakdown, with no other edit; the
    definition is docs/development.md's example, so the page's example is one that works (the k axis starts at 1)."""
    try:
        exec(docs_metric_example(), vars(metrics).copy())
        ds = report(ReportArgs(ks=[1, 4], objectives=["TopM:2@4"], **FAST), toy_run)["datasets"]["toy"]
        assert ds["metrics"]["top2@4"]["value"] == pytest.approx(ds["objectives"]["TopM:2@4"]["value"], abs=1e-12)
        assert math.isnan(ds["metrics"]["top2@1"]["value"])
        md = (Path(toy_run.output_dir) / "report.md").read_text()
        assert "| top-2 mean@k (reward) | n/a |" in md and "| level | problems | pass@1 |" in md
        assert " top2@4 |" in next(line for line in md.splitlines() if line.startswith("| level | problems |"))
        assert "| `top2@k` | mean of the 2 best of k rewards | `TopM:2` |" in metrics.metric_table_markdown()
    finally:
        metrics._ROWS.unregister("top2")


def test_a_metric_is_shown_in_the_unit_its_row_gives(toy_run):
    """A single-value metric that is not a rate (here 12.5, a length) stays 12.5 under 0/1 rewards (not 1250.0) and
    sits under a plain "metric" header; pass@k, a probability, is in %; --objectives keep their own table."""
    try:
        @metrics.register_metric("length", key="mean_length", label="mean length (tokens)", on="correct", unit="raw",
                                 per_k=False, definition="a length", as_lstat="not an L-statistic")
        def _length(inputs, k, config):
            return torch.full((inputs["correct"].shape[0],), 12.5, dtype=torch.float64)

        ds = report(ReportArgs(ks=[1, 4], objectives=["TopM:2@4"], **FAST), toy_run)["datasets"]["toy"]
        md = (Path(toy_run.output_dir) / "report.md").read_text()
        assert ds["metrics"]["mean_length"]["value"] == 12.5
        assert "| metric | value |\n|---|---|\n| mean length (tokens) | 12.500 [12.500, 12.500] |" in md
        assert "1250.0" not in md and "| objective (reward) | value |\n|---|---|\n| TopM:2@4 |" in md
        pass1 = ds["metrics"]["pass@1"]
        assert f"| pass@k | {100 * pass1['value']:.1f} [" in md
    finally:
        metrics._ROWS.unregister("length")


def test_registry_refuses_duplicates_and_unknown_places():
    with pytest.raises(ValueError, match="already registered"):
        metrics.register_metric("pass", key="other@{k}", label="x", on="correct", unit="probability", definition="",
                                as_lstat="")(
            lambda i, k, c: None)
    with pytest.raises(ValueError, match="already registered"):  # another name, the same report.json key
        metrics.register_metric("pass2", key="pass@{k}", label="x", on="correct", unit="probability", definition="",
                                as_lstat="")(
            lambda i, k, c: None)
    with pytest.raises(ValueError, match="unknown places.*table, breakdown, plot"):
        metrics.register_metric("x", key="x@{k}", label="x", on="correct", unit="probability", shows=("tables",),
                                definition="", as_lstat="")
    with pytest.raises(ValueError, match="on must be one of correct, reward, got 'rewards'"):
        metrics.register_metric("x", key="x@{k}", label="x", on="rewards", unit="reward", definition="", as_lstat="")
    with pytest.raises(ValueError, match="unit must be one of probability, reward, raw, got 'percent'"):
        metrics.register_metric("x", key="x@{k}", label="x", on="reward", unit="percent", definition="", as_lstat="")
    assert "pass2" not in metrics.METRICS and "x" not in metrics.METRICS


def test_docs_metric_table_is_the_registry():
    doc = (REPO / "docs" / "evaluation.md").read_text()
    assert metrics.metric_table_markdown() in doc, "regenerate: print(metrics.metric_table_markdown())"
