"""Every bad input a careless user tried ends in one line, `<prog>: error: ...` naming the flag, file and line, with
exit status 2, before anything slow starts: no traceback, and no value silently coerced (NaN weights, a list
gold, a YAML string where a list belongs, a negative sample count in the recipe).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ordergrad_trl.evaluation.cli import command as main

REPO = Path(__file__).resolve().parents[1]
REF = ["--backend", "reference", "--reward_workers", "1", "--plot", "false", "--disable_tqdm"]


def cli_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


@pytest.fixture
def run_dir(tmp_path):
    """A finished reference run on two arithmetic problems."""
    out = tmp_path / "run"
    main(["run", *REF, "--datasets", "arithmetic", "--limit", "2", "--num_samples", "2", "--output_dir", str(out)])
    return out


@pytest.mark.parametrize("stage", ["run", "generate", "score", "report"])
def test_output_dir_that_is_a_file(tmp_path, capsys, stage):
    file = tmp_path / "a_file"
    file.write_text("x")
    extra = [*REF[:2], "--datasets", "arithmetic"] if stage in ("run", "generate") else []
    msg = cli_error(capsys, [stage, *extra, "--output_dir", str(file)])
    assert msg == f"ordergrad-eval {stage}: error: --output_dir {file}: {file} is a file, not a directory; pass a " \
                  "directory"


def test_changed_settings_on_rerun(run_dir, capsys):
    msg = cli_error(capsys, ["generate", *REF[:2], "--datasets", "arithmetic", "--limit", "2", "--num_samples", "2",
                             "--temperature", "0.5", "--output_dir", str(run_dir)])
    assert "other provenance: temperature 1.0 -> 0.5" in msg and "--overwrite" in msg


@pytest.mark.parametrize("split", ["validation", ""])
def test_bad_split(tmp_path, capsys, split):
    msg = cli_error(capsys, ["run", *REF, "--datasets", "arithmetic", "--split", split,
                             "--output_dir", str(tmp_path / "r")])
    assert "--split" in msg
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("content,want", [
    (b'{"problem": "1+1?", "answer": "2"}\n{"problem": "2+2?", "answer": \n', r"data.jsonl:2: not valid JSON"),
    (b'{"problem": "1+1?", "answer": "2"}\n{"problem": "caf\xe9?", "answer": "3"}\n',
     r"data.jsonl:2: not UTF-8 \(byte 0xe9 at column 17\)"),
    (b"", r"data.jsonl: no problems \(the file is empty\)"),
    (b"\n\n", r"data.jsonl: no problems"),
    (b'{"problem": "1+1?", "answer": ["2", "3"]}\n', r"data.jsonl:1: 'answer' is a list"),
    (b'{"problem": "1+1?", "answer": "2"}\n{"problem": "x", "answer": {"value": 2}}\n',
     r"data.jsonl:2: 'answer' is a dict"),
    (b'["1+1?", "2"]\n', r"data.jsonl:1: a row must be a JSON object"),
])  # fmt: skip
def test_bad_data_files_name_file_and_line(tmp_path, capsys, content, want):
    data = tmp_path / "data.jsonl"
    data.write_bytes(content)
    msg = cli_error(capsys, ["run", *REF, "--datasets", str(data), "--output_dir", str(tmp_path / "r")])
    assert msg.startswith(f"ordergrad-eval run: error: --datasets {data}")
    assert re.search(want, msg), msg
    assert not (tmp_path / "r").exists()


def test_a_json_file_with_a_list_gold(tmp_path, capsys):
    data = tmp_path / "data.json"
    data.write_text(json.dumps([{"problem": "1+1?", "answer": "2"}, {"problem": "2+2?", "answer": [4]}]))
    assert "'answer' is a list" in cli_error(capsys, ["generate", *REF[:2], "--datasets", str(data),
                                                      "--output_dir", str(tmp_path / "r")])


@pytest.mark.parametrize("yaml_text,want", [
    ("datasets: [arithmetic\nlimit: 2\n", r"--config {cfg}:2: not valid YAML"),
    ("datset: [arithmetic]\n", r"--config {cfg}: unknown key\(s\) datset"),
    ("datasets: arithmetic\n", r"--config {cfg}: --datasets must be list\[str\] \(a YAML list: \[a, b\]\), got str "
                               r"'arithmetic'"),
    ("num_samples: four\n", r"--config {cfg}: --num_samples must be int, got str 'four'"),
    ("- datasets\n", r"--config {cfg}: must be a YAML mapping"),
])  # fmt: skip
def test_bad_config_files(tmp_path, capsys, yaml_text, want):
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(yaml_text)
    msg = cli_error(capsys, ["run", "--config", str(cfg), *REF, "--output_dir", str(tmp_path / "r")])
    assert re.search(want.format(cfg=re.escape(str(cfg))), msg), msg


def test_missing_config_file(tmp_path, capsys):
    msg = cli_error(capsys, ["run", "--config", str(tmp_path / "nope.yaml")])
    assert msg.startswith(f"ordergrad-eval run: error: --config {tmp_path / 'nope.yaml'}: file not found")


def test_bad_flag_value_is_one_line(capsys):
    msg = cli_error(capsys, ["generate", "--num_samples", "many"])
    assert msg == "ordergrad-eval generate: error: argument --num_samples/--num-samples: invalid int value: " \
                  "'many'"


@pytest.mark.parametrize("weights", ["correct=inf", "correct=nan", "correct=1,format=-inf"])
def test_non_finite_reward_weights(run_dir, capsys, weights):
    msg = cli_error(capsys, ["report", "--output_dir", str(run_dir), "--reward_weights", weights])
    assert "--reward_weights: the weight of" in msg and "must be a finite number" in msg


@pytest.mark.parametrize("flag,value", [("--temperature", "nan"), ("--top_p", "nan"), ("--cvar_q", "nan")])
def test_non_finite_floats(tmp_path, capsys, flag, value):
    msg = cli_error(capsys, ["run", *REF, "--datasets", "arithmetic", flag, value, "--output_dir",
                             str(tmp_path / "r")])
    assert flag in msg


def test_a_corrupt_run_file_is_named(run_dir, capsys):
    gen = run_dir / "arithmetic" / "generations.jsonl"
    lines = gen.read_bytes().split(b"\n")
    gen.write_bytes(b"\n".join([lines[0][:20], *lines[1:]]))  # a cut line that is not the last
    for stage in ("score", "report"):
        (run_dir / "arithmetic" / "scores.jsonl").unlink(missing_ok=True)
        msg = cli_error(capsys, [stage, "--output_dir", str(run_dir)])
        assert f"{gen}:1: not a UTF-8 JSON object" in msg


def test_unknown_stage_and_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["evaluate"])
    assert exc.value.code == 2 and "unknown stage 'evaluate'" in capsys.readouterr().err
    main(["--help"])
    assert "run" in capsys.readouterr().out


def test_a_subprocess_error_is_one_line_with_exit_2(tmp_path):
    """The real command, as a user runs it: one line on stderr, status 2."""
    data = tmp_path / "data.jsonl"
    data.write_bytes(b"\xff\xfe\n")
    proc = subprocess.run([sys.executable, "-m", "eval.run", "--backend", "reference", "--datasets", str(data),
                           "--output_dir", str(tmp_path / "r")], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"eval.run: error: --datasets {data}:1: not UTF-8 (byte 0xff at column 1); save the file as UTF-8"]


# ------------------------------------------------------------------------------------------------ the recipe
@pytest.mark.parametrize("flag,value", [("--max_eval_samples", "-1"), ("--max_train_samples", "0")])
def test_recipe_refuses_sample_counts_that_evaluate_nothing(flag, value):
    sys.path.insert(0, str(REPO / "recipes"))
    try:
        from math_cvar import MathScriptArguments
    finally:
        sys.path.remove(str(REPO / "recipes"))
    from trl import TrlParser

    with pytest.raises(ValueError, match=flag.lstrip("-")):
        TrlParser(MathScriptArguments).parse_args_and_config([flag, value])
