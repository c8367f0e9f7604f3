"""Every bad input a careless user tried ends in one line, `<prog>: error: ...` naming the flag, file and line, with
exit status 2, before anything slow starts: no traceback, and no value silently coerced (NaN weights, a list
gold, a YAML string where a list belongs, a negative sample count in the recipe).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest

from ordergrad_trl.evaluation.cli import command as main
from helpers import bounded

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
    proc = bounded.run([sys.executable, "-m", "eval.run", "--backend", "reference", "--datasets", str(data),
                           "--output_dir", str(tmp_path / "r")], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"eval.run: error: --datasets {data}:1: not UTF-8 (byte 0xff at column 1); save the file as UTF-8"]


@pytest.mark.parametrize("argv,want", [
    (["run", *REF[:2], "--datset", "arithmetic"], "unrecognized arguments: --datset arithmetic"),
    (["report", "--kss", "1"], "unrecognized arguments: --kss 1"),
    (["report", "stray"], "unrecognized arguments: stray"),
    (["run", *REF[:2], "--output_dir", ""], "--output_dir must not be empty"),
    (["run", "--model", " "], "--model must not be empty"),
    (["run", *REF[:2], "--datasets", "gsm8k", "--data_dir", "."], "--data_dir . is read only with --local_data"),
])  # fmt: skip
def test_unknown_flags_and_empty_names(tmp_path, capsys, monkeypatch, argv, want):
    monkeypatch.chdir(tmp_path)
    assert want in cli_error(capsys, argv)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even into the current directory


def test_config_given_as_equals_once_and_keys_once(tmp_path, capsys):
    cfg = tmp_path / "eval.yaml"
    cfg.write_text("datasets: [arithmetic]\nlimit: 1\nnum_samples: 1\n")
    out = tmp_path / "r"
    main(["run", f"--config={cfg}", *REF, "--output_dir", str(out)])
    assert json.loads((out / "report.json").read_text())["datasets"]["arithmetic"]["num_samples"] == 1
    assert "--config is given more than once" in cli_error(capsys, ["run", "--config", str(cfg), "--config", str(cfg)])
    cfg.write_text("num_samples: 2\nnum_samples: 3\n")
    assert f"--config {cfg}:2: not valid YAML (key 'num_samples' given twice)" in cli_error(
        capsys, ["run", "--config", str(cfg)])


def test_reward_weights_name_a_field_once(run_dir, capsys):
    msg = cli_error(capsys, ["report", "--output_dir", str(run_dir), "--reward_weights", "correct=1,correct=2"])
    assert "--reward_weights gives correct twice" in msg


@pytest.mark.parametrize("stem", ["provenance.json", "report.md", "REPORT.json", "passk.png", "merged_model"])
def test_a_dataset_named_like_a_run_file_is_refused(tmp_path, capsys, stem):
    data = tmp_path / f"{stem}.jsonl"
    data.write_text('{"problem": "1+1?", "answer": "2"}\n')
    msg = cli_error(capsys, ["run", *REF, "--datasets", str(data), "--output_dir", str(tmp_path / "r")])
    assert f"gives the folder name {stem!r}" in msg and not (tmp_path / "r").exists()


@pytest.mark.parametrize("name,content,want", [
    ("UP.JSONL", b'{"problem": "1+1?", "answer": [2]}\n', r"UP.JSONL:1: 'answer' is a list"),  # suffix in any case
    ("d.jsonl", b'{"problem": "1+1?", "answer": 2.5e400}\n', r"d.jsonl:1: 'answer' is a float \(Infinity\)"),
    ("d.jsonl", b'{"problem": "1+1?", "answer": NaN}\n', r"d.jsonl:1: 'answer' is a float \(NaN\)"),
    ("d.json", b'[\n {"problem": "1+1?", "answer": "2"},\n {"problem": "x" "answer": "1"}\n]\n',
     r"d.json:3: not valid JSON \(Expecting ',' delimiter"),
    ("d.json", b'[\n {"problem": "1+1?", "answer": "2"},\n {"problem": "x", "answer": [1]}\n]\n',
     r"d.json row 2: 'answer' is a list"),
])  # fmt: skip
def test_data_file_faults_are_placed(tmp_path, capsys, name, content, want):
    data = tmp_path / name
    data.write_bytes(content)
    msg = cli_error(capsys, ["run", *REF, "--datasets", str(data), "--output_dir", str(tmp_path / "r")])
    assert re.search(want, msg), msg


def test_a_data_file_takes_only_split_labels(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"problem": "1+1?", "answer": "2"}\n')
    msg = cli_error(capsys, ["run", *REF, "--datasets", str(data), "--split", "bogus", "--output_dir",
                             str(tmp_path / "r")])
    assert "--split bogus: a data file has no splits" in msg and not (tmp_path / "r").exists()
    main(["run", *REF, "--datasets", str(data), "--split", "train", "--output_dir", str(tmp_path / "r")])


@pytest.mark.parametrize("make,want", [
    (lambda d: (d / "afile").write_text("x") and "afile", "a file; pass a checkpoint directory"),
    (lambda d: (d / "empty").mkdir() or "empty", "the directory holds no config.json"),
    (lambda d: "missing_dir/", "path not found"),
    (lambda d: "nobody/no-such-model-here", "cannot load its tokenizer from nobody/no-such-model-here"),
])  # fmt: skip
def test_a_bad_model_is_one_line_before_anything_loads(tmp_path, capsys, monkeypatch, make, want):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import: where an earlier test imported it, the Hub lookup would
    # otherwise retry the network (about 45 s here) before failing the same way
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    model = make(tmp_path)
    msg = cli_error(capsys, ["run", "--backend", "hf", "--model", model, "--datasets", "arithmetic",
                             "--output_dir", str(tmp_path / "r")])
    assert f"--model {model}: {want}" in msg, msg
    assert not (tmp_path / "r").exists()


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


def test_recipe_bad_setting_is_one_line_with_exit_2(tmp_path):
    """As a user runs it (from outside the repository): the config's check, as one line, before any model loads."""
    proc = bounded.run([sys.executable, str(REPO / "recipes" / "math_cvar.py"), "--max_eval_samples", "-1"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == \
        "math_cvar.py: error: max_eval_samples must be >= 0 (0 skips evaluation), got -1"
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []


def test_evaluate_checks_its_keywords_as_the_command_line_checks_flags(tmp_path):
    """From Python: an empty output_dir is refused (it used to become ./eval_out) and a string where a bool or a list
    belongs is refused by name (it used to pass unchecked), before anything is written."""
    from ordergrad_trl.evaluation import evaluate
    from ordergrad_trl.evaluation.errors import UsageError

    with pytest.raises(UsageError, match="--output_dir must not be empty"):
        evaluate(backend="reference", datasets=["arithmetic"], output_dir="")
    for option, value in (("disable_tqdm", "false"), ("ks", "4"), ("num_samples", 1.5)):
        with pytest.raises(UsageError, match=rf"evaluate\(\): --{option}"):
            evaluate(backend="reference", datasets=["arithmetic"], output_dir=str(tmp_path / "run"), **{option: value})
    assert not (tmp_path / "run").exists() and not Path("eval_out").exists()


def test_one_file_name_in_two_unicode_forms_is_one_dataset(tmp_path):
    """NFC and NFD spellings of one accented file name (macOS writes NFD) map to one folder, so two --datasets
    entries naming them are refused as the same dataset instead of becoming two."""
    import unicodedata

    from ordergrad_trl.evaluation.errors import UsageError
    from ordergrad_trl.evaluation.problems import check_keys, dataset_key

    composed, decomposed = (unicodedata.normalize(form, "problèmes") for form in ("NFC", "NFD"))
    assert composed != decomposed
    for name in (composed, decomposed):
        (tmp_path / f"{name}.jsonl").write_text('{"problem": "1+1?", "answer": "2"}\n')
    assert dataset_key(str(tmp_path / f"{decomposed}.jsonl")) == composed
    with pytest.raises(UsageError, match="would both be stored as"):
        check_keys([str(tmp_path / f"{composed}.jsonl"), str(tmp_path / f"{decomposed}.jsonl")])
