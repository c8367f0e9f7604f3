"""Issue 63, classes 2 and 3: training writes only inside its run, one writer per output_dir, and a run is its data.

Links: a save is preceded by a check of the folder it writes into, so a link planted as `config.json` or
`trainer_state.json` is refused before transformers' `open(path, "w")` follows it. Lock: the eval's run lock, held
by the main process for the whole run. Identity: the record holds a hash of the data's rows; a model without a
record is not replaced unless asked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ordergrad_trl.training import run_identity
from ordergrad_trl.training.dynamic_sampling import DYNAMIC_SAMPLING
from ordergrad_trl.training.output_dir import OutputDirError, lock_output_dir, refuse_links
from ordergrad_trl.training.resolved_config import RESOLVED_CONFIG

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "math_cvar.py"


def ZERO(completions, **kwargs):  # a reward for trainers that never reach a step
    return [0.0] * len(completions)


@pytest.fixture(scope="module")
def recipe():
    import importlib.util

    spec = importlib.util.spec_from_file_location("math_cvar_hostile63", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _data(answers):
    import datasets

    return datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"{a}?"}], "answer": a}
                                       for a in answers])


def _args(out: Path, **kw):
    from helpers.tiny_model import CPU_TRAINING_ARGS

    from ordergrad_trl import OrderGradConfig

    return OrderGradConfig(**{**CPU_TRAINING_ARGS, "output_dir": str(out), "max_steps": 1,
                              "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 4,
                              "ordergrad_k": 2, **kw})


@pytest.mark.parametrize("name", ["config.json", "trainer_state.json", "checkpoint-1/trainer_state.json",
                                  "model.safetensors"])
def test_a_planted_link_is_refused_before_any_save(tmp_path, name):
    """Every place a save writes: the check names the link, and the file it points to is unchanged."""
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    out = tmp_path / "out"
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).symlink_to(outside)
    with pytest.raises(OutputDirError, match=name.split("/")[-1] + " is a symbolic link"):
        refuse_links(out)
    hard = tmp_path / "hard"
    hard.mkdir()
    (hard / "config.json").hardlink_to(outside)
    with pytest.raises(OutputDirError, match="hard link"):
        refuse_links(hard)
    assert outside.read_text() == "keep me"


def test_the_trainer_refuses_to_save_through_a_link(tiny_model_dir, tmp_path):
    """A link planted while the trainer runs (after the start-up check): its save_model and checkpoint refuse."""
    from ordergrad_trl import OrderGradTrainer

    outside = tmp_path / "precious.json"
    outside.write_text("{}")
    out = tmp_path / "out"
    trainer = OrderGradTrainer(model=str(tiny_model_dir), reward_funcs=[ZERO],
                               args=_args(out), train_dataset=_data(["1", "2", "3", "4"]))
    out.mkdir(exist_ok=True)
    (out / "config.json").symlink_to(outside)
    with pytest.raises(OutputDirError, match="config.json is a symbolic link"):
        trainer.save_model()
    with pytest.raises(OutputDirError, match="config.json is a symbolic link"):
        trainer._save_checkpoint(trainer.model, None)
    assert outside.read_text() == "{}"


def test_a_second_writer_is_refused_while_the_first_holds_the_run(tmp_path, recipe, tiny_model_dir):
    from trl import ModelConfig

    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from ordergrad_trl.training.output_dir import lock_output_dir
        lock_output_dir({str(out)!r}); print("locked", flush=True); sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(OutputDirError, match=r"output_dir: .* being written by another process \(pid"):
            lock_output_dir(out)
        script = recipe.MathScriptArguments(dataset_name="arithmetic", max_eval_samples=0)
        with pytest.raises(recipe.InputError, match="another process"):
            recipe.main(script, _args(out), ModelConfig(model_name_or_path=str(tiny_model_dir)),
                        data=(_data(["1", "2", "3", "4"]), None))
        assert not (out / "model.safetensors").exists()
    finally:
        holder.communicate("")
    lock_output_dir(out)  # released with its holder


def test_a_model_without_a_record_is_not_replaced_unless_asked(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"someone's model")
    with pytest.raises(run_identity.RunIdentityError,
                       match=f"model.safetensors.*without the record.*{RESOLVED_CONFIG}"):
        run_identity.check_new_run(out, {"training": {}}, overwrite=False)
    aside = run_identity.check_new_run(out, {"training": {}}, overwrite=True)
    assert (aside / "model.safetensors").read_bytes() == b"someone's model"


def test_the_run_is_its_data_not_the_data_path(tmp_path, recipe, tiny_model_dir):
    """A trained run, then the same settings on other rows under the same data name: a resume and a new run are
    refused naming the data's hash; the same rows again are the same run."""
    from trl import ModelConfig

    out = tmp_path / "out"
    script = recipe.MathScriptArguments(dataset_name="arithmetic", max_eval_samples=0)
    model = ModelConfig(model_name_or_path=str(tiny_model_dir))
    recipe.main(script, _args(out, save_strategy="steps", save_steps=1), model,
                data=(_data(["1", "2", "3", "4"]), None))
    record = json.loads((out / RESOLVED_CONFIG).read_text())
    expected = run_identity.data_hashes(train=_data(["1", "2", "3", "4"]))["train_sha256"]
    assert record["data"]["train_sha256"] == expected
    for resume in ("true", None):
        with pytest.raises(recipe.InputError, match="data.train_sha256"):
            recipe.main(script, _args(out, resume_from_checkpoint=resume), model,
                        data=(_data(["1", "2", "3", "5"]), None))
    old = dict(record)
    old.pop("data")  # a record from before the hash: its path decides, as before
    assert run_identity.differences(old, record) == []


# ------------------------------------------------------------------ start-up refusals and unused settings


@pytest.mark.parametrize("mode", list(DYNAMIC_SAMPLING))  # every registered mode
def test_a_data_set_smaller_than_one_generation_batch_is_refused_naming_the_sizes(tiny_model_dir, tmp_path, mode):
    from ordergrad_trl import OrderGradTrainer
    from ordergrad_trl.training.config_checks import DatasetTooSmall

    args = _args(tmp_path / "out", per_device_train_batch_size=8, ordergrad_dynamic_sampling=mode)
    with pytest.raises(DatasetTooSmall, match=r"has 1 prompt\(s\), fewer than .*\(2 = generation_batch_size 8 / "
                                              r"num_generations 4"):
        OrderGradTrainer(model=str(tiny_model_dir), reward_funcs=[ZERO],
                         args=args, train_dataset=_data(["1"]))


@pytest.mark.parametrize("name, value", [("ORDERGRAD_REWARD_TIMEOUT_S", "0"), ("ORDERGRAD_REWARD_WORKERS", "100000")])
def test_reward_variables_set_after_import_are_refused_at_start_up(tiny_model_dir, tmp_path, monkeypatch, recipe,
                                                                   name, value):
    """Set after the package is imported (a recipe's `env:` block does that): refused when the trainer is built
    and when the recipe reads its config, not at the first reward call."""
    from ordergrad_trl import OrderGradTrainer

    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        OrderGradTrainer(model=str(tiny_model_dir), reward_funcs=[ZERO],
                         args=_args(tmp_path / "out"), train_dataset=_data(["1", "2"]))
    monkeypatch.delenv(name)
    config = tmp_path / "c.yaml"
    config.write_text(f"env:\n  {name}: '{value}'\nmax_steps: 1\n")
    with pytest.raises(SystemExit) as stop:
        recipe.parse_command_line(["--config", str(config), "--output_dir", str(tmp_path / "o")])
    assert stop.value.code == 2


@pytest.mark.parametrize("settings, named", [
    ({"ordergrad_prompt_weight_window": 3}, "ordergrad_prompt_weight_window"),
    ({"ordergrad_prompt_weight": "inverse", "ordergrad_prompt_weight_window": 3}, "ordergrad_prompt_weight_window"),
    ({"ordergrad_dynamic_sampling_max_rounds": 5}, "ordergrad_dynamic_sampling_max_rounds"),
    ({"ordergrad_dynamic_sampling": "filter", "ordergrad_dynamic_sampling_max_rounds": 5},
     "ordergrad_dynamic_sampling_max_rounds"),
])
def test_a_setting_nothing_reads_is_named_in_a_warning(tmp_path, caplog, settings, named):
    import logging

    with caplog.at_level(logging.WARNING, logger="ordergrad_trl.training.config"):
        _args(tmp_path / "out", **settings)
    assert any(named in r.getMessage() and "unused" in r.getMessage() for r in caplog.records), caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ordergrad_trl.training.config"):
        _args(tmp_path / "out", ordergrad_prompt_weight="curverl", ordergrad_prompt_weight_window=3,
              ordergrad_dynamic_sampling="refill", ordergrad_dynamic_sampling_max_rounds=5)
    assert not any("unused" in r.getMessage() for r in caplog.records), caplog.text
