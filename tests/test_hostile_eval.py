"""Issue 52, class 5: one line, exit 2, for every eval failure left.

Each test is a property over every case of its kind, so a case added later is covered by construction. Everything
here is unit-level or the eval's reference backend: no model is trained.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers.eval_runs import cli_error

from ordergrad_trl.evaluation.cli import command as main

FLAGS = ["--reward_workers", "1", "--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"]

REPORT = ["--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"]


def _ref(out: Path, *extra) -> list[str]:
    return ["run", "--backend", "reference", "--datasets", "arithmetic", "--limit", "3", "--num_samples", "2",
            "--output_dir", str(out), *FLAGS, *extra]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile52") / "run"
    main(_ref(out))
    return out


@pytest.fixture
def run(finished, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


def _pass1(out: Path) -> float:
    return main(["report", "--output_dir", str(out), *REPORT])["datasets"]["arithmetic"]["metrics"]["pass@1"]["value"]


def test_only_the_runs_own_generation_files_are_read(run):
    """Every stray name the old glob matched (a backup beside the real file): never read, never checked."""
    from ordergrad_trl.evaluation.layout import generation_files, kind_of

    gen = run / "arithmetic" / "generations.jsonl"
    stray = ["generations.bak.jsonl", "generations.old.jsonl", "generations.rank1.bak.jsonl", "generations-2.jsonl",
             "generationsX.jsonl", "generations.rank.jsonl"]
    for name in stray:
        (run / "arithmetic" / name).write_text("not even JSON\n")
        assert kind_of(run / "arithmetic" / name) is None
    assert generation_files(run / "arithmetic") == [gen]
    assert _pass1(run) == 1.0
    assert kind_of(run / "arithmetic" / "generations.rank12.jsonl") == "generations"


@pytest.mark.parametrize("flag, value", [("--num_samples", "1"), ("--limit", "2")])
def test_a_rerun_asking_for_less_than_the_run_holds_is_refused(run, capsys, flag, value):
    argv = _ref(run)
    argv[argv.index(flag) + 1] = value
    assert cli_error(capsys, argv).startswith(f"ordergrad-eval run: error: {flag} {value}: ")
    main(_ref(run))  # the same flags again: fine
    more = _ref(run)
    more[more.index("--num_samples") + 1] = "3"
    main(more)  # more samples: added


def test_a_breakdown_field_no_problem_has_is_named(run, capsys):
    msg = cli_error(capsys, ["report", "--output_dir", str(run), *REPORT, "--breakdown", "op", "nosuchfield"])
    assert "--breakdown nosuchfield" in msg and "op" in msg
    main(["report", "--output_dir", str(run), *REPORT, "--breakdown", "op"])


@pytest.mark.parametrize("name", ["problems.jsonl", "generations.jsonl", "scores.jsonl"])
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_row_file_that_is_not_a_file_is_named(run, capsys, name, kind):
    path = run / "arithmetic" / name
    path.unlink()
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    for stage in (["score", "--output_dir", str(run), "--reward_workers", "1", "--disable_tqdm"],
                  ["report", "--output_dir", str(run), *REPORT]):
        msg = cli_error(capsys, stage)
        assert str(path) in msg and ("FIFO" in msg or "directory" in msg), msg


def test_a_cut_problems_file_is_healed_by_the_hint(run, capsys):
    """F43: the refusal's hint (rerun generate with the same flags) works, and every stage passes after it."""
    path = run / "arithmetic" / "problems.jsonl"
    path.write_bytes(path.read_bytes()[:-40])
    msg = cli_error(capsys, ["report", "--output_dir", str(run), *REPORT])
    assert "rerun generate with the same flags" in msg
    argv = _ref(run)
    argv[0] = "generate"
    main([a for a in argv if a not in ("--reward_workers", "1", "--bootstrap_samples", "20", "--plot", "false")])
    assert _pass1(run) == 1.0


def test_numpy_numbers_reach_evaluate_as_numbers(tmp_path):
    import numpy as np

    from ordergrad_trl.evaluation.run import evaluate

    rep = evaluate(output_dir=tmp_path / "run", backend="reference", datasets=["arithmetic"], limit=np.int64(2),
                   num_samples=np.int32(2), bootstrap_samples=np.int32(20), reward_workers=np.int8(1),
                   ci_level=np.float32(0.9), plot=np.bool_(False), disable_tqdm=True)
    assert rep["datasets"]["arithmetic"]["metrics"]["pass@1"]["value"] == 1.0


@pytest.mark.parametrize("text, named", [
    ("on: 1\n", "'on' is read as the bool True"),
    ("learning_rate: 1.0e-5\nyes: 2\n", ":2: the key 'yes'"),
    ("1: x\n", "the int 1"),
])
def test_a_yaml_key_that_is_no_flag_name_is_named(tmp_path, text, named):
    from ordergrad_trl.yaml_config import load_yaml_config

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=named):
        load_yaml_config(path)


def test_yaml_merge_keys_work_and_a_key_twice_is_still_refused(tmp_path):
    from ordergrad_trl.yaml_config import load_yaml_config

    path = tmp_path / "c.yaml"
    path.write_text("<<: &base {learning_rate: 2.0e-5, max_steps: 3}\nmax_steps: 4\n")
    assert load_yaml_config(path) == {"learning_rate": 2.0e-5, "max_steps": 4}
    path.write_text("max_steps: 3\nmax_steps: 4\n")
    with pytest.raises(ValueError, match="given twice"):
        load_yaml_config(path)


@pytest.mark.parametrize("damage", ["no_weights", "truncated", "bad_header", "header_cut", "shard_missing"])
def test_a_model_folder_that_cannot_load_is_named(tiny_model_dir, tmp_path, capsys, damage):
    from ordergrad_trl.evaluation.modeling import weights_problem

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    if damage == "no_weights":
        weights.unlink()
    elif damage == "truncated":
        weights.write_bytes(data[: len(data) - 100])
    elif damage == "shard_missing":
        weights.rename(model / "model-00001-of-00002.safetensors")
        (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
            "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    elif damage == "bad_header":
        weights.write_bytes(data[:8] + b"{" * 20 + data[28:])
    else:
        weights.write_bytes(data[:20])
    assert weights_problem(model)
    msg = cli_error(capsys, ["generate", "--model", str(model), "--datasets", "arithmetic", "--limit", "1",
                             "--output_dir", str(tmp_path / "run"), "--disable_tqdm"])
    assert f"--model {model}: " in msg
    assert weights_problem(tiny_model_dir) is None


def test_a_full_disk_while_saving_a_merged_adapter_names_the_folder(tmp_path, monkeypatch):
    """Issue 52: the one eval write that is not a run row, the adapter merged for vLLM, also names a full disk."""
    import errno

    from ordergrad_trl.evaluation import modeling
    from ordergrad_trl.evaluation.errors import UsageError

    class Full:
        def save_pretrained(self, path):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(modeling, "load_model", lambda *a, **k: Full())
    source = modeling.ModelSource("adapter", "base", "adapter", "base")
    with pytest.raises(UsageError, match=r"merged_model: No space left on device while saving the adapter merged"):
        modeling.materialize_merged(source, tmp_path, Full(), "float32", fp={"base": None, "adapter": None})
    assert not (tmp_path / modeling.MERGED_DIR / "ordergrad_merged_from.json").exists()  # the next run merges again
