"""Issue 52, classes 3 and 4: numbers and launches that cannot train; a checkpoint knows its run.

Each test is a property over every case of its kind, so a case added later is covered by construction. Everything
here is unit-level or the eval's reference backend: no model is trained.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ordergrad_trl.training import run_identity
from ordergrad_trl.training.launch_env import LAUNCHER_MARKS, LAUNCHERS, check_launch_environment
from ordergrad_trl.training.numeric_fields import MIN_TEMPERATURE, check_numeric_fields
from ordergrad_trl.training.resolved_config import RESOLVED_CONFIG, resolved_config

# ------------------------------------------------------------------ 3. numbers that cannot train, a stale launch


def _config(**kw):
    from helpers.tiny_model import CPU_TRAINING_ARGS

    from ordergrad_trl import OrderGradConfig

    return OrderGradConfig(**{**CPU_TRAINING_ARGS, "output_dir": "/tmp/unused-ordergrad-52", **kw})


@pytest.mark.parametrize("settings, named", [
    ({"learning_rate": 1e-3, "weight_decay": 1e6}, "learning_rate * weight_decay"),
    ({"learning_rate": 0.5, "weight_decay": 2.0}, "learning_rate * weight_decay"),  # exactly 1: weights zeroed
    ({"temperature": 1e-300}, "temperature"),
    ({"temperature": MIN_TEMPERATURE / 2}, "temperature"),
    ({"steps_per_generation": 0}, "steps_per_generation"),
    ({"steps_per_generation": -3}, "steps_per_generation"),
])
def test_numbers_that_cannot_train_are_refused_when_the_config_is_built(settings, named):
    with pytest.raises(ValueError, match=named.replace("*", r"\*")):
        _config(**settings)


def test_numbers_at_the_documented_bounds_still_train():
    """Just inside each bound is accepted (the bounds refuse only what cannot train)."""
    config = _config(learning_rate=1e-3, weight_decay=999.0, temperature=MIN_TEMPERATURE)
    assert config.temperature == MIN_TEMPERATURE


def test_numpy_numbers_are_the_numbers_they_hold():
    """Every numpy integer / float type is accepted where an int / float belongs, and stored as a plain one."""
    import dataclasses

    import numpy as np

    @dataclasses.dataclass
    class Args:
        max_steps: int = 1
        learning_rate: float = 1e-6

    for kind in (np.int8, np.int16, np.int32, np.int64, np.uint32):
        args = Args(max_steps=kind(8))
        check_numeric_fields(args)
        assert type(args.max_steps) is int and args.max_steps == 8
    for kind in (np.float16, np.float32, np.float64):
        args = Args(learning_rate=kind(0.5))
        check_numeric_fields(args)
        assert type(args.learning_rate) is float
    with pytest.raises(ValueError, match="max_steps"):
        check_numeric_fields(Args(max_steps=np.float64(1.5)))


@pytest.mark.parametrize("stale", [
    {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"},
    {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"},
    {"WORLD_SIZE": "8"},
])
def test_a_stale_distributed_environment_is_refused_naming_its_variables(stale):
    with pytest.raises(ValueError) as err:
        check_launch_environment(env=stale)
    for name, value in stale.items():
        assert f"{name}={value}" in str(err.value)
    for name, (needs, _) in LAUNCHERS.items():  # every variable a launcher sets, agreeing with WORLD_SIZE: trusted
        size = stale["WORLD_SIZE"]
        check_launch_environment(env={**stale, **dict.fromkeys(needs, "0"), **{
            v: size for v in needs if v in ("ROLE_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                            "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS")}, "RANK": "0"})
    check_launch_environment(env={**stale, "ORDERGRAD_TRUST_DIST_ENV": "1"})
    check_launch_environment(env={"WORLD_SIZE": "1", "RANK": "0"})


def test_a_stale_environment_stops_the_config_in_seconds(monkeypatch):
    """Through OrderGradConfig (which would otherwise block in torch.distributed's start-up)."""
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}.items():
        monkeypatch.setenv(name, value)
    for mark in LAUNCHER_MARKS:
        monkeypatch.delenv(mark, raising=False)
    import signal

    def hung(*_):
        raise TimeoutError("the config waited for ranks that never come")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)  # without the check the start-up blocks for torch.distributed's whole timeout
    try:
        with pytest.raises(ValueError, match="WORLD_SIZE=2"):
            _config()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# what torch's elastic agent (torchrun, accelerate launch) sets for rank 0 of 2
TORCHRUN_ENV = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
                "ROLE_RANK": "0", "ROLE_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555",
                "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0"}


@pytest.mark.parametrize("mark", LAUNCHER_MARKS)
def test_a_lone_stale_launcher_variable_beside_world_size_is_refused_naming_it(mark):
    """Issue 63: one leftover launcher variable (a TORCHELASTIC_RUN_ID, a SLURM_PROCID) beside WORLD_SIZE made the old
    check trust the launch, and start-up waited for ranks that never come. A launcher sets all of its variables."""
    stale = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555", mark: "7"}
    with pytest.raises(ValueError, match=f"{mark}=7.*stale"):
        check_launch_environment(env=stale)
    check_launch_environment(env=TORCHRUN_ENV)  # a real launch is not refused
    slurm = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "5"}  # an salloc shell, one task
    with pytest.raises(ValueError, match="SLURM_NTASKS=1 but WORLD_SIZE=2"):
        check_launch_environment(env={"WORLD_SIZE": "2", "RANK": "0", **slurm})


@pytest.mark.parametrize("stale", [{"LOCAL_RANK": "0"}, {"LOCAL_RANK": "1", "RANK": "1"},
                                   {"WORLD_SIZE": "1", "LOCAL_RANK": "0"}])
def test_a_stale_local_rank_is_blamed_not_master_addr(stale, monkeypatch):
    """Issue 63: without a launcher, a leftover LOCAL_RANK made transformers start torch.distributed, which failed
    with "environment variable MASTER_ADDR expected": the variable to unset is the stale one."""
    for name in [*LAUNCHER_MARKS, "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in stale.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as err:
        _config()
    message = str(err.value)
    assert "LOCAL_RANK=" in message and "stale" in message and "(unset " in message and "{" not in message


def test_fsdp_unlaunched_and_deepspeed_missing_are_named(monkeypatch):
    import importlib.util
    from types import SimpleNamespace

    with pytest.raises(ValueError, match="fsdp='full_shard'.*no launcher"):
        check_launch_environment(SimpleNamespace(fsdp="full_shard", deepspeed=None), env={})
    check_launch_environment(SimpleNamespace(fsdp="full_shard", deepspeed=None), env=TORCHRUN_ENV)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    with pytest.raises(ValueError, match="deepspeed package is not installed"):
        check_launch_environment(SimpleNamespace(fsdp="", deepspeed="zero2.json"), env={})
    with pytest.raises(ValueError, match="ACCELERATE_USE_DEEPSPEED='true'.*not installed"):
        check_launch_environment(SimpleNamespace(fsdp="", deepspeed=None), env={"ACCELERATE_USE_DEEPSPEED": "true"})

# ------------------------------------------------------------------------------ 4. a checkpoint knows its run

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "math_cvar.py"


@pytest.fixture(scope="module")
def recipe():
    import importlib.util

    spec = importlib.util.spec_from_file_location("math_cvar_hostile52", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def record(recipe):
    """A real resolved config: every field of the recipe's three groups and the plan, as the recipe saves it."""
    from trl import ModelConfig

    groups = {"script": recipe.MathScriptArguments(dataset_name="arithmetic"), "training": _config(),
              "model": ModelConfig(model_name_or_path="some/model")}
    return json.loads(json.dumps(resolved_config(groups, groups["training"].ordergrad_plan), default=str))


def _other(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return "set"
    return [value, "x"] if isinstance(value, list) else {**value, "x": 1}


def test_every_field_is_compared_unless_a_resume_may_change_it(record):
    """Each field of every group (and the plan), changed alone: named by `differences` exactly when it is not in
    RESUMABLE; every ordergrad_* field but the logging one is compared, so a field added later is covered."""
    cases = 0
    for group, fields in record.items():
        for name, value in fields.items():
            new = json.loads(json.dumps(record))
            new[group][name] = _other(value)
            diff = run_identity.differences(record, new)
            if run_identity.resumable(name):
                assert diff == [], (group, name, diff)
            else:
                assert len(diff) == 1 and diff[0].startswith(f"{group}.{name}: "), (group, name, diff)
            cases += 1
    assert cases > 200
    ordergrad = [n for n in record["training"] if n.startswith("ordergrad_")]
    assert ordergrad and all(not run_identity.resumable(n) for n in ordergrad if n != "ordergrad_log_ks")
    for named in ("num_generations", "learning_rate", "seed", "ordergrad_objective", "ordergrad_k"):
        assert not run_identity.resumable(named)
    for may in ("max_steps", "logging_steps", "save_steps", "eval_steps", "output_dir", "report_to"):
        assert run_identity.resumable(may)


def test_a_field_the_checkpoint_lacks_counts_unless_it_is_the_default(record):
    old = json.loads(json.dumps(record))
    del old["training"]["ordergrad_k"]
    defaults = {"ordergrad_k": record["training"]["ordergrad_k"]}
    assert run_identity.differences(old, record, defaults) == []
    new = json.loads(json.dumps(record))
    new["training"]["ordergrad_k"] = 7
    assert run_identity.differences(old, new, defaults)[0].startswith("training.ordergrad_k: (not in")


def _checkpoint(root: Path, step: int, record: dict, state: str | None = None) -> Path:
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / RESOLVED_CONFIG).write_text(json.dumps(record))
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}) if state is None else state)
    return ckpt


def test_a_resume_with_other_settings_is_refused_naming_each(tmp_path, record):
    out = tmp_path / "out"
    _checkpoint(out, 9, record)
    newest = _checkpoint(out, 10, record)
    for value in ("true", "TRUE", " last ", True):
        assert run_identity.check_run(record, out, value, overwrite=False) == str(newest)
    longer = json.loads(json.dumps(record))
    longer["training"]["max_steps"] = 1000
    assert run_identity.check_run(longer, out, str(newest), overwrite=False) == str(newest)
    other = json.loads(json.dumps(record))
    other["training"]["ordergrad_objective"] = "Mean"
    other["training"]["num_generations"] = 16
    other["model"]["model_name_or_path"] = "other/model"
    with pytest.raises(run_identity.RunIdentityError) as err:
        run_identity.check_run(other, out, "true", overwrite=False)
    for key in ("training.ordergrad_objective", "training.num_generations", "model.model_name_or_path"):
        assert key in str(err.value)


@pytest.mark.parametrize("value, state, named", [
    ("true", None, "holds no checkpoint"),
    ("nowhere/checkpoint-3", None, "no such checkpoint folder"),
    ("{ckpt}", "{not json", "trainer_state.json cannot be read"),
    ("{ckpt}", "[1, 2]", "not a JSON object"),
    ("{ckpt}", '{"global_step": "x"}', "no valid global_step"),
])
def test_a_bad_checkpoint_is_named(tmp_path, record, value, state, named):
    out = tmp_path / "out"
    out.mkdir()
    ckpt = _checkpoint(tmp_path / "elsewhere", 3, record, state) if state else None
    with pytest.raises(run_identity.RunIdentityError, match=named):
        run_identity.check_run(record, out, value.format(ckpt=ckpt), overwrite=False)
    for value in (None, False, "", "false", "None"):
        assert run_identity.resolve_checkpoint(value, out) is None


def test_a_new_run_onto_another_run_is_refused_or_moves_it_aside(tmp_path, record):
    out = tmp_path / "out"
    out.mkdir()
    (out / RESOLVED_CONFIG).write_text(json.dumps(record))
    (out / "model.safetensors").write_bytes(b"old")
    assert run_identity.check_new_run(out, record, overwrite=False) is None  # the same run again
    other = json.loads(json.dumps(record))
    other["training"]["ordergrad_objective"] = "Mean"
    with pytest.raises(run_identity.RunIdentityError, match="training.ordergrad_objective"):
        run_identity.check_new_run(out, other, overwrite=False)
    _checkpoint(out, 2, record)
    with pytest.raises(run_identity.RunIdentityError, match="checkpoint-2"):
        run_identity.check_new_run(out, record, overwrite=False)
    aside = run_identity.check_new_run(out, other, overwrite=True)
    assert not out.exists() and (aside / "model.safetensors").read_bytes() == b"old"
    assert aside.name.startswith("out.replaced-")


def test_the_recipe_refuses_before_the_model_loads(tmp_path, recipe, record, monkeypatch):
    """Through the recipe's main: a resume of another run is one InputError (one line, exit 2 in the CLI)."""
    import datasets
    from trl import ModelConfig

    out = tmp_path / "out"
    other = json.loads(json.dumps(record))
    other["training"]["ordergrad_objective"] = "Mean"
    _checkpoint(out, 1, other)
    script = recipe.MathScriptArguments(dataset_name="arithmetic", max_eval_samples=0)
    training = _config(output_dir=str(out), resume_from_checkpoint="true")
    model = ModelConfig(model_name_or_path=str(tmp_path / "no-such-model"))  # never loaded: refused before
    data = (datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": "1+1?"}], "answer": "2"}]), None)
    with pytest.raises(recipe.InputError, match="ordergrad_objective"):
        recipe.main(script, training, model, data=data)


def test_a_reward_that_returns_a_generator_or_lacks_its_column_is_named():
    from ordergrad_trl.tasks.rewards import math_reward
    from ordergrad_trl.training.reward_checks import check_reward_values

    for once in ((x for x in [1.0, 0.0]), iter([1.0, 0.0]), map(float, [1, 0])):
        with pytest.raises(TypeError, match="reward function 'mine' returned a .*read only once"):
            check_reward_values("mine", once, 2)
    check_reward_values("mine", [1.0, None], 2)
    with pytest.raises(ValueError, match="math_reward: the dataset has no 'answer' column .*solution"):
        math_reward(["\\boxed{1}"], prompts=["p"], solution=["1"])


def test_the_recipe_names_a_model_without_a_chat_template(tiny_model_dir, tmp_path, recipe):
    """The recipe's prompts are chat messages: a tokenizer without a template is one InputError, before training."""
    import datasets
    from trl import ModelConfig

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    script = recipe.MathScriptArguments(dataset_name="arithmetic", max_eval_samples=0)
    training = _config(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4,
                       num_generations=4, max_completion_length=4)
    data = (datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": "1+1?"}], "answer": "2"}] * 4), None)
    with pytest.raises(recipe.InputError, match="has no chat template"):
        recipe.main(script, training, ModelConfig(model_name_or_path=str(model)), data=data)
