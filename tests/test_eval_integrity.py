"""Every stage verifies what it reads against provenance.json, and every reader checks each row's shape.

Issue 28: `score` scored a gold edited by hand, `report` reported a `scores.jsonl` copied from another run, a
deleted dataset entry let another file of the same name resume, `"sample": -1` overwrote another sample, a
duplicated score row was last-wins, and rows of the wrong shape ended in tracebacks. Each case here must end in
one line naming file:line and exit status 2, or (duplicates) in the number the first row gives.

The runs use the reference backend (every sample is the problem's own solution, so 100% is the right answer): one
run is built per module and copied for each case, so no case generates or scores more than a few rows.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ordergrad_trl.evaluation import evaluate, records
from ordergrad_trl.evaluation.args import PathArgs, ReportArgs
from helpers.eval_runs import cli_error

from ordergrad_trl.evaluation.cli import command as main
from ordergrad_trl.evaluation.errors import UsageError
from ordergrad_trl.evaluation.report import report

FLAGS = ["--reward_workers", "1", "--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"]


def write_set(path: Path, pairs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"problem": q, "answer": a}) + "\n" for q, a in pairs))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished runs of two data files that share a name (so their ids): A and B, n = 2."""
    root = tmp_path_factory.mktemp("integrity")
    a = write_set(root / "A" / "test.jsonl", [("1 + 1?", "2"), ("2 + 2?", "4"), ("3 + 3?", "6")])
    b = write_set(root / "B" / "test.jsonl", [("5 + 5?", "10"), ("6 + 6?", "12"), ("7 + 7?", "14")])
    for name, data in (("runA", a), ("runB", b)):
        main(["run", "--backend", "reference", "--datasets", str(data), "--num_samples", "2", "--output_dir",
              str(root / name), *FLAGS])
    return root


@pytest.fixture
def run_a(runs, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(runs / "runA", out)
    return out


def stage(name: str, out: Path) -> list[str]:
    extra = {"score": ["--reward_workers", "1"], "report": ["--bootstrap_samples", "20", "--plot", "false"]}[name]
    return [name, "--output_dir", str(out), "--disable_tqdm", *extra]


def edit_rows(path: Path, edit, restamp: bool = True) -> None:
    """Rewrite a JSONL file with `edit(rows)` (a list of dicts, or of raw lines when they are str). `restamp`: give
    each row the check of its edited fields, as a determined editor would, so the checks behind the rows' own
    (provenance, tags, completion checksums) are what is tested; without it the row check itself is."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows = edit(rows)
    if restamp:
        rows = [r if isinstance(r, str) else {**r, "check": records.row_check(r)} for r in rows]
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def edit_provenance(out: Path, edit) -> None:
    """Edit provenance.json and give it the check of its new contents (a determined editor)."""
    from ordergrad_trl.evaluation.provenance import write_provenance

    prov = json.loads((out / "provenance.json").read_text())
    edit(prov)
    write_provenance(out, prov)


def pass_at_1(out: Path) -> float:
    return main(stage("report", out))["datasets"]["test"]["metrics"]["pass@1"]["value"]


# ------------------------------------------------------------------------------ 1. verification at every entrance
def test_the_untouched_run_passes_every_entrance(run_a):
    assert main(stage("score", run_a))["test"]["scored"] == 0
    assert pass_at_1(run_a) == 1.0
    rep = evaluate(generations=run_a, reward_workers=1, bootstrap_samples=20, plot=False, disable_tqdm=True)
    assert rep["datasets"]["test"]["num_problems"] == 3


@pytest.mark.parametrize("which", ["score", "report"])
def test_a_gold_edited_by_hand_is_refused(run_a, capsys, which):
    def edit(rows):
        rows[1]["answer"] = "5"
        return rows

    problems = run_a / "test" / "problems.jsonl"
    edit_rows(problems, edit)
    before = (run_a / "test" / "scores.jsonl").read_bytes()
    msg = cli_error(capsys, stage(which, run_a))
    assert f"{problems}:2:" in msg and "gold" in msg and "'5'" in msg
    assert (run_a / "test" / "scores.jsonl").read_bytes() == before


def test_a_question_edited_or_a_problem_added_is_refused(run_a, capsys):
    problems = run_a / "test" / "problems.jsonl"
    original = problems.read_bytes()
    edit_rows(problems, lambda rows: [*rows[:2], {**rows[2], "question": "9 + 9?"}])
    assert f"{problems}:3:" in cli_error(capsys, stage("report", run_a))
    problems.write_bytes(original)
    edit_rows(problems, lambda rows: [*rows, {**rows[0], "id": "extra"}])
    msg = cli_error(capsys, stage("score", run_a))
    assert f"{problems}:4:" in msg and "'extra'" in msg
    problems.write_bytes(original)
    edit_rows(problems, lambda rows: rows[:2])  # a problem deleted: its samples would vanish from the report
    assert f"{problems}:" in cli_error(capsys, stage("report", run_a))


def test_scores_copied_from_another_run_are_refused_by_report_and_rescored_by_score(runs, run_a, capsys):
    scores = run_a / "test" / "scores.jsonl"
    shutil.copy(runs / "runB" / "test" / "scores.jsonl", scores)
    msg = cli_error(capsys, stage("report", run_a))
    assert f"{scores}:1:" in msg and "checksum" in msg
    with pytest.raises(UsageError, match="checksum"):  # the Python entrance too
        report(ReportArgs(plot=False, bootstrap_samples=20), PathArgs(str(run_a)))
    assert main(stage("score", run_a))["test"]["scored"] == 6  # every copied row was for another completion
    assert pass_at_1(run_a) == 1.0


@pytest.mark.parametrize("which", ["score", "report"])
def test_generations_copied_from_another_run_are_refused(runs, run_a, capsys, which):
    """Run B's samples carry A's problem ids (both files are test.jsonl) but were made for other problems."""
    gens = run_a / "test" / "generations.jsonl"
    shutil.copy(runs / "runB" / "test" / "generations.jsonl", gens)
    msg = cli_error(capsys, stage(which, run_a))
    assert f"{gens}:1:" in msg and "not made by this run" in msg


def test_a_generation_without_its_tag_is_refused(run_a, capsys):
    gens = run_a / "test" / "generations.jsonl"
    edit_rows(gens, lambda rows: [*rows[:3], {k: v for k, v in rows[3].items() if k != "tag"}, *rows[4:]])
    assert f"{gens}:4:" in cli_error(capsys, stage("report", run_a))


def test_a_score_edited_by_hand_is_refused(run_a, capsys):
    scores = run_a / "test" / "scores.jsonl"
    edit_rows(scores, lambda rows: [*rows[:2], {**rows[2], "correct": 0.0}, *rows[3:]], restamp=False)
    for which in ("score", "report"):
        msg = cli_error(capsys, stage(which, run_a))
        assert f"{scores}:3:" in msg and "edited" in msg
    edit_rows(scores, lambda rows: rows[:2] + rows[3:], restamp=False)  # the line deleted, as the message says
    assert main(stage("score", run_a))["test"]["scored"] == 1  # score redoes it
    assert pass_at_1(run_a) == 1.0


def test_a_score_of_a_sample_never_generated_is_refused_then_dropped(run_a, capsys):
    scores = run_a / "test" / "scores.jsonl"
    gens = run_a / "test" / "generations.jsonl"
    edit_rows(gens, lambda rows: rows[:-1])  # the last sample's generation is gone; its score stays
    assert f"{scores}:" in cli_error(capsys, stage("report", run_a))
    main(stage("score", run_a))  # drops it
    rep = main(stage("report", run_a))["datasets"]["test"]
    assert rep["missing_samples"] == 1 and rep["metrics"]["pass@1"]["value"] == 1.0


def test_a_deleted_dataset_entry_is_refused_at_every_entrance(runs, run_a, capsys):
    edit_provenance(run_a, lambda prov: prov["datasets"].pop("test"))
    for which in ("score", "report"):
        msg = cli_error(capsys, stage(which, run_a))
        assert f"{run_a / 'test'}: a dataset folder without an entry" in msg
    # the rerun with another file of the same name must not resume the old problems as the new ones
    other = runs / "B" / "test.jsonl"
    msg = cli_error(capsys, ["run", "--backend", "reference", "--datasets", str(other), "--num_samples", "2",
                             "--output_dir", str(run_a), *FLAGS])
    assert "without an entry" in msg and "--overwrite" in msg


@pytest.mark.parametrize("entry", ["x", None, 7, []])
def test_a_dataset_entry_that_is_not_a_record_is_refused(run_a, capsys, entry):
    prov = json.loads((run_a / "provenance.json").read_text())
    prov["datasets"]["test"] = entry
    (run_a / "provenance.json").write_text(json.dumps(prov))
    for argv in (stage("score", run_a), stage("report", run_a),
                 ["generate", "--backend", "reference", "--datasets", "arithmetic", "--limit", "1", "--num_samples",
                  "2", "--output_dir", str(run_a), "--disable_tqdm"]):
        assert "provenance.json" in cli_error(capsys, argv)


def test_a_dataset_folder_copied_in_from_another_run_is_refused(runs, run_a, capsys):
    shutil.copytree(runs / "runB" / "test", run_a / "other")
    assert f"{run_a / 'other'}: a dataset folder without an entry" in cli_error(capsys, stage("report", run_a))


def test_a_run_whose_provenance_was_deleted_is_refused(run_a, capsys):
    (run_a / "provenance.json").unlink()
    for which in ("score", "report"):
        assert "provenance.json: missing" in cli_error(capsys, stage(which, run_a))


@pytest.mark.parametrize("sample", [-1, 2, 99])
def test_a_sample_index_outside_0_n_is_refused(run_a, capsys, sample):
    """`"sample": -1` used to overwrite another sample (missing_samples: -1); 2 is n for this run."""
    gens = run_a / "test" / "generations.jsonl"
    edit_rows(gens, lambda rows: [*rows[:1], {**rows[1], "sample": sample}, *rows[2:]])
    for which in ("score", "report"):
        msg = cli_error(capsys, stage(which, run_a))
        assert f"{gens}:2:" in msg and ("'sample'" in msg or "outside [0, 2)" in msg)


def test_a_generation_of_an_unknown_problem_is_refused(run_a, capsys):
    gens = run_a / "test" / "generations.jsonl"
    edit_rows(gens, lambda rows: [*rows, {**rows[0], "id": "nobody"}])
    assert f"{gens}:7:" in cli_error(capsys, stage("report", run_a))


# ------------------------------------------------------------------------------ 3. rows validated on read
BAD_ROWS = [
    ("generations.jsonl", "sample", "abc"),
    ("generations.jsonl", "sample", 1.5),
    ("generations.jsonl", "sample", True),
    ("generations.jsonl", "id", None),
    ("generations.jsonl", "completion", None),
    ("generations.jsonl", "completion", 42),
    ("scores.jsonl", "correct", "yes"),
    ("scores.jsonl", "correct", 0.5),
    ("scores.jsonl", "sample", "abc"),
    ("scores.jsonl", "id", None),
    ("scores.jsonl", "crc", "x"),
    ("scores.jsonl", "status", "fine"),
    ("problems.jsonl", "answer", None),
    ("problems.jsonl", "id", 7),
]


@pytest.mark.parametrize(("file", "field", "value"), BAD_ROWS)
@pytest.mark.parametrize("which", ["score", "report"])
def test_a_row_of_the_wrong_shape_is_one_line_naming_file_and_line(run_a, capsys, file, field, value, which):
    path = run_a / "test" / file

    def edit(rows):
        row = dict(rows[1])
        if value is None and field in ("id",):
            row.pop(field)  # missing altogether
        else:
            row[field] = value
        return [rows[0], row, *rows[2:]]

    edit_rows(path, edit)
    msg = cli_error(capsys, stage(which, run_a))
    assert f"{path}:2:" in msg and repr(field) in msg


def test_duplicated_rows_first_wins_in_every_reader(run_a):
    """A duplicated score row (same sample, same completion) that says wrong: the first row (right) counts."""
    scores = run_a / "test" / "scores.jsonl"
    edit_rows(scores, lambda rows: [*rows, {**rows[0], "correct": 0.0, "pred": "0"}])
    assert records.read_jsonl(scores)[0]["correct"] == 1.0 and len(records.read_jsonl(scores)) == 6
    assert pass_at_1(run_a) == 1.0
    main(stage("score", run_a))  # nothing to rescore: the first row matches its completion
    assert pass_at_1(run_a) == 1.0
    gens = run_a / "test" / "generations.jsonl"
    first = json.loads(gens.read_text().splitlines()[0])
    edit_rows(gens, lambda rows: [*rows, {**rows[0], "completion": "other text"}])  # a second generation row
    assert records.read_samples(run_a / "test")[first["id"], first["sample"]]["completion"] == first["completion"]
    assert pass_at_1(run_a) == 1.0


def test_duplicated_problem_rows_first_wins(run_a):
    problems = run_a / "test" / "problems.jsonl"
    edit_rows(problems, lambda rows: [*rows, {**rows[0], "answer": "999"}])
    assert [p["answer"] for p in records.read_jsonl(problems)] == ["2", "4", "6"]
    assert pass_at_1(run_a) == 1.0
