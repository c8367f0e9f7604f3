"""Issue 63, what was left: refusals at start-up, one line naming the file, and settings that were silently unused.

A reward range a prompt weight cannot take is refused when the trainer is built (before its model loads) and when the
recipe reads its settings, not at step 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ordergrad_trl.tasks.rewards import get_reward_funcs
from ordergrad_trl.training.reward_checks import RewardRangeError, check_prompt_weight_range

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "math_cvar.py"


def _args(out: Path, **kw):
    from helpers.tiny_model import CPU_TRAINING_ARGS

    from ordergrad_trl import OrderGradConfig

    return OrderGradConfig(**{**CPU_TRAINING_ARGS, "output_dir": str(out), "max_steps": 1,
                              "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 4,
                              "ordergrad_k": 2, **kw})


def _data(answers):
    import datasets

    return datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"{a}?"}], "answer": a}
                                       for a in answers])


@pytest.fixture(scope="module")
def recipe():
    import importlib.util

    spec = importlib.util.spec_from_file_location("math_cvar_hostile63_startup", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ a reward range the prompt weight cannot take

@pytest.mark.parametrize("weight, names, reward_weights, refused", [
    ("curverl", ["length"], None, True),  # [-1, 0]
    ("gaussian:0.5,0.2", ["math", "length"], None, True),  # [-1, 1]
    ("curverl", ["math", "length"], [1.0, 0.0], False),  # the length reward weighs nothing
    ("curverl", ["math", "format"], [0.5, 0.5], False),  # [0, 1]
    ("curverl", ["math", "format"], None, True),  # up to 2
    ("inverse", ["math"], None, False),
    ("inverse", ["math", "format"], [0.5, 0.5], True),  # 0.5 is no success rate
    ("none", ["length"], None, False),
    ("curverl", ["math"], [-1.0], True),
])
def test_a_reward_range_the_prompt_weight_cannot_take_is_refused_by_name(tmp_path, weight, names, reward_weights,
                                                                         refused):
    args = _args(tmp_path / "out", ordergrad_prompt_weight=weight, reward_weights=reward_weights)
    funcs = get_reward_funcs(names, args)
    if not refused:
        check_prompt_weight_range(args, funcs, names)
        return
    with pytest.raises(RewardRangeError) as err:
        check_prompt_weight_range(args, funcs, names)
    message = str(err.value)
    assert "ordergrad_prompt_weight" in message and all(n in message for n in names) and "\n" not in message


def test_a_function_without_a_declared_range_is_left_to_the_per_batch_check(tmp_path):
    args = _args(tmp_path / "out", ordergrad_prompt_weight="curverl")
    check_prompt_weight_range(args, [lambda completions, **kw: [5.0] * len(completions)], ["mine"])


def test_the_trainer_refuses_the_length_reward_before_its_model_loads(tmp_path):
    """Issue 63: this failed at step 1 (`rewards must be in [0, 1], got -1.0`), after the model loaded. The model
    here does not exist: reaching it would raise OSError, not the refusal."""
    from ordergrad_trl import OrderGradTrainer

    args = _args(tmp_path / "out", ordergrad_prompt_weight="curverl", reward_weights=[1.0, 0.5])
    with pytest.raises(RewardRangeError, match="length_penalty in \\[-1, 0\\] x 0.5"):
        OrderGradTrainer(model=str(tmp_path / "no-model"), reward_funcs=get_reward_funcs(["math", "length"], args),
                         args=args, train_dataset=_data(["1", "2", "3", "4"]))


def test_the_recipe_refuses_it_when_it_reads_its_settings(tmp_path, recipe, capsys):
    with pytest.raises(SystemExit) as stop:
        recipe.parse_command_line(["--reward_funcs", "math", "length", "--ordergrad_prompt_weight", "curverl",
                                   "--output_dir", str(tmp_path / "o")])
    assert stop.value.code == 2
    line = capsys.readouterr().err.strip()
    assert "ordergrad_prompt_weight='curverl'" in line and "length" in line and "\n" not in line


# ------------------------------------------------------------------ numpy numbers in the ordergrad_* fields

def test_numpy_integers_are_integers_in_every_field(tmp_path):
    """Issue 63: TRL's fields took np.int64 while ordergrad_k, the window, max_rounds and log_ks refused it (and
    num_generations too, checked before it was made plain). Stored as plain ints; a numpy 2.5 is still refused."""
    import numpy as np

    config = _args(tmp_path / "out", num_generations=np.int64(4), ordergrad_k=np.int64(2),
                   ordergrad_prompt_weight="curverl", ordergrad_prompt_weight_window=np.int32(8),
                   ordergrad_dynamic_sampling="refill", ordergrad_dynamic_sampling_max_rounds=np.int16(2),
                   ordergrad_log_ks=[np.int64(1), 2, np.uint8(4)])
    values = (config.num_generations, config.ordergrad_k, config.ordergrad_prompt_weight_window,
              config.ordergrad_dynamic_sampling_max_rounds, *config.ordergrad_log_ks)
    assert values == (4, 2, 8, 2, 1, 2, 4) and all(type(v) is int for v in values)
    with pytest.raises(ValueError, match="ordergrad_k must be a positive integer, got 2.5"):
        _args(tmp_path / "out", ordergrad_k=np.float64(2.5))
