"""recipes/math_cvar.py as a user runs it, from another directory, on bad input (issue 28): a key repeated in the YAML,
a missing or directory data path, a broken data line, a missing model folder, an unwritable `--output_dir`, a
`reward_weights` count that does not match `reward_funcs`, too many `ordergrad_reward_objectives`. Each must end with
exit status 2 and ONE line on stderr naming the field or path (no traceback), before any model loads."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import bounded

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "math_cvar.py"
QUICKSTART = (REPO / "recipes" / "configs" / "cpu_quickstart.yaml").read_text()

# (id, argv, what the one line must say); {tmp} is the directory the recipe runs in
CASES = [
    ("repeated_key", ["--config", "twice.yaml"],
     f"--config twice.yaml:{QUICKSTART.count(chr(10)) + 1}: not valid YAML (key 'learning_rate' given twice)"),
    ("missing_data", ["--dataset_name", "nope.jsonl"], "dataset_name nope.jsonl: no such file (relative to {tmp})"),
    ("data_is_a_directory", ["--dataset_name", "folder.jsonl"], "dataset_name folder.jsonl: is a directory"),
    ("data_is_an_absolute_directory", ["--dataset_name", "{tmp}"], "dataset_name {tmp}: is a directory"),
    ("broken_data_line", ["--dataset_name", "broken.jsonl"], "dataset_name broken.jsonl:2: not valid JSON"),
    ("list_gold", ["--dataset_name", "list_gold.jsonl"], "dataset_name list_gold.jsonl:1: 'answer' is a list"),
    ("broken_eval_data", ["--eval_dataset_name", "broken.jsonl"], "eval_dataset_name broken.jsonl:2: not valid JSON"),
    ("unknown_set", ["--dataset_name", "nosuchset"], "dataset_name nosuchset: unknown math set 'nosuchset'"),
    ("missing_model", ["--model_name_or_path", "./no_model"], "model_name_or_path ./no_model: no such folder"),
    ("missing_absolute_model", ["--model_name_or_path", "{tmp}/no/model"],
     "model_name_or_path {tmp}/no/model: no such folder"),
    ("model_folder_without_config", ["--model_name_or_path", "folder.jsonl"],
     "model_name_or_path folder.jsonl: the folder has no config.json"),
    ("output_dir_under_proc", ["--output_dir", "/proc/ordergrad-out"], "output_dir /proc/ordergrad-out: cannot write"),
    ("output_dir_under_a_file", ["--output_dir", "a_file/out"], "output_dir a_file/out: a_file is a file, not a folder"),
    ("reward_weights_count", ["--reward_funcs", "math", "format", "--reward_weights", "1.0"],
     "reward_weights [1.0] has 1 entries but reward_funcs ['math', 'format'] has 2"),
    ("too_many_reward_objectives", ["--ordergrad_reward_objectives", "TopM:2@4", "Mean@2"],
     "ordergrad_reward_objectives ['TopM:2@4', 'Mean@2'] has 2 entries but reward_funcs ['math'] has 1"),
    ("overflowing_objective", ["--ordergrad_objective", "1e308,1e308", "--ordergrad_k", "2"],
     "ordergrad_objective='1e308,1e308' at ordergrad_k=2, num_generations=8: its advantages overflow"),
    ("subnormal_objective", ["--ordergrad_objective", "1e-320,0", "--ordergrad_k", "2"],
     "ordergrad_objective='1e-320,0' at ordergrad_k=2, num_generations=8: its largest advantage is"),
    ("bad_flag_value", ["--learning_rate", "abc"], "argument --learning_rate/--learning-rate: invalid float value"),
    ("empty_data_file", ["--dataset_name", "empty.jsonl"], "dataset_name empty.jsonl: no problems (the file is empty)"),
    ("broken_parquet", ["--dataset_name", "bad.parquet", "--max_eval_samples", "0"],
     "dataset_name bad.parquet: Parquet magic bytes not found"),  # found by the loader, after parsing
    ("row_without_question", ["--dataset_name", "no_question.jsonl", "--max_eval_samples", "0"],
     "dataset_name no_question.jsonl: custom row 0: no question could be extracted"),
    ("reward_weight_overflows_float32", ["--reward_weights", "1e308"], "reward_weights [1e+308] are inf in float32"),
    ("reward_funcs_twice", ["--reward_funcs", "math", "math"], "reward_funcs ['math', 'math'] lists ['math'] more than"),
]  # fmt: skip


def _prepare(tmp: Path) -> None:
    (tmp / "twice.yaml").write_text(QUICKSTART + "learning_rate: 1.0e-3\n")  # its last line: the second learning_rate
    (tmp / "folder.jsonl").mkdir()
    (tmp / "broken.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": \n')
    (tmp / "list_gold.jsonl").write_text('{"problem": "5*5", "answer": ["25"]}\n')
    (tmp / "a_file").write_text("not a folder")
    (tmp / "empty.jsonl").write_text("")
    (tmp / "bad.parquet").write_text("not parquet")
    (tmp / "no_question.jsonl").write_text('{"answer": "2"}\n')


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every case run at once, each as its own process in the same scratch directory outside the repository."""
    tmp = tmp_path_factory.mktemp("recipe_inputs")
    _prepare(tmp)
    before = sorted(p.name for p in tmp.iterdir())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

    def run(argv):
        argv = [a.replace("{tmp}", str(tmp)) for a in argv]
        return bounded.run([sys.executable, str(RECIPE), *argv], cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=600)  # fmt: skip

    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
        results = dict(zip([c[0] for c in CASES], pool.map(run, [c[1] for c in CASES])))
    return tmp, before, results


@pytest.mark.parametrize("name,argv,want", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(runs, name, argv, want):
    tmp, before, results = runs
    proc = results[name]
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("math_cvar.py: error: ") and want.replace("{tmp}", str(tmp)) in lines[0], lines[0]
    assert proc.stdout == "", proc.stdout[-2000:]  # refused before anything started (the settings print comes later)


def test_nothing_was_written(runs):
    tmp, before, _ = runs
    assert sorted(p.name for p in tmp.iterdir()) == before  # no output_dir, no probe left behind


def test_a_repeated_key_is_refused_where_trl_would_keep_the_last(tmp_path):
    """The case the issue reported: TRL's own reader takes the second `learning_rate`, the recipe's refuses it."""
    from trl import ModelConfig, TrlParser

    from ordergrad_trl import OrderGradConfig

    config = tmp_path / "twice.yaml"
    config.write_text(QUICKSTART + "learning_rate: 1.0e-3\n")
    spec = __import__("importlib.util").util.spec_from_file_location("math_cvar_inputs_test", RECIPE)
    recipe = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    _, args, _ = TrlParser((recipe.MathScriptArguments, OrderGradConfig, ModelConfig)).parse_args_and_config(
        ["--config", str(config)])
    assert args.learning_rate == 1.0e-3  # last wins in TRL: the silent change the recipe must refuse
    with pytest.raises(SystemExit) as exc:
        recipe.parse_command_line(["--config", str(config)])
    assert exc.value.code == 2


def test_every_numeric_field_of_the_script_and_model_groups_is_refused_by_name(tmp_path, capsys):
    """Per class: NaN in every float field and 1.5 in every int field of the recipe's own argument groups (the
    training group: tests/test_config.py) stop parsing with one line naming the field, exit status 2. The YAML route
    is the one that passes a float where an int belongs untouched (argparse converts flags)."""
    import dataclasses
    import math
    import typing

    import yaml
    from trl import ModelConfig

    from ordergrad_trl.training.numeric_fields import _kinds

    spec = __import__("importlib.util").util.spec_from_file_location("math_cvar_numeric_test", RECIPE)
    recipe = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    checked = 0
    for group in (recipe.MathScriptArguments, ModelConfig):
        hints = typing.get_type_hints(group)
        for f in dataclasses.fields(group):
            kinds, _ = _kinds(hints[f.name])
            if not kinds or not f.init:
                continue
            config = tmp_path / f"{f.name}.yaml"
            settings = {**yaml.safe_load(QUICKSTART), f.name: 1.5 if kinds == {int} else math.nan}  # one key each
            config.write_text(yaml.safe_dump(settings))
            with pytest.raises(SystemExit) as exc:
                recipe.parse_command_line(["--config", str(config), "--output_dir", str(tmp_path / "out")])
            err = capsys.readouterr().err
            assert exc.value.code == 2 and err.count("\n") == 1 and f"{f.name} must be" in err, (f.name, err)
            checked += 1
    assert checked >= 5


def test_use_vllm_without_vllm_is_one_line_naming_the_fix(tmp_path, capsys):
    from ordergrad_trl.training.trl_private import installed_vllm

    if installed_vllm() is not None:
        pytest.skip("vLLM is installed here (CI's vLLM step): the refusal needs a machine without it")
    spec = __import__("importlib.util").util.spec_from_file_location("math_cvar_vllm_test", RECIPE)
    recipe = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    with pytest.raises(SystemExit) as exc:
        recipe.parse_command_line(["--use_vllm", "true", "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "use_vllm=True but vLLM is not installed" in err
