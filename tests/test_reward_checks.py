"""A reward function that returns something other than one number (or None) per completion is named in the error
(issue 28: a string used to fail as `too many dimensions 'str'`), the reward registry, and the gold check of
`math_reward` (a dict or list gold is refused with its row, as eval refuses it)."""

from __future__ import annotations

import asyncio
import functools
import inspect

import numpy as np
import pytest
import torch
from datasets import Dataset

from ordergrad_trl.tasks import rewards
from ordergrad_trl.tasks.rewards import REWARDS, get_reward_funcs, gold_text, math_reward, register_reward
from ordergrad_trl.training.reward_checks import check_reward_values, checked_reward_funcs


# ------------------------------------------------------------------------------------------ the value check
@pytest.mark.parametrize("values", [
    [1.0, 0, None, float("nan"), True, np.float32(0.5), np.int64(2), torch.tensor(1.0)],
    (0.0, 1.0),
    torch.tensor([0.0, 1.0]),
    np.array([1.0, 0.0]),
    [],
])  # fmt: skip
def test_numbers_and_none_pass(values):
    check_reward_values("f", values, len(values))


@pytest.mark.parametrize("values,shown", [
    (["1.0", 0.0], r"returned str '1.0' for completion 0 of 2"),  # a numeric string too: TRL would crash on it
    ([0.0, "abc"], r"returned str 'abc' for completion 1 of 2"),
    ([0.0, [1.0]], r"returned list \[1.0\] for completion 1 of 2"),
    ([{"score": 1}], r"returned dict \{'score': 1\} for completion 0 of 1"),
    ([b"1"], r"returned bytes b'1' for completion 0 of 1"),
    ([torch.tensor([1.0, 2.0])], r"returned Tensor .* for completion 0 of 1"),
    ([torch.tensor([1.0])], r"returned Tensor .* for completion 0 of 1"),  # TRL would stack it to (B, 1)
    ([np.array([1.0])], r"returned ndarray .* for completion 0 of 1"),
    ([object()], r"returned object .* for completion 0 of 1"),
    ("10", r"returned str '10': a reward function must return a list"),
    (None, r"returned NoneType None: a reward function must return a list"),
    (1.0, r"returned float 1.0: a reward function must return a list"),
    ({"a": 1.0}, r"returned dict .*: a reward function must return a list"),
])  # fmt: skip
def test_anything_else_names_the_function_and_the_value(values, shown):
    with pytest.raises(TypeError, match=rf"^reward function 'my_reward' {shown}"):
        check_reward_values("my_reward", values, len(values) if hasattr(values, "__len__") else 1)


def _strings(completions, **kwargs):
    return ["yes" for _ in completions]


async def _async_strings(completions, **kwargs):
    return ["yes" for _ in completions]


class _Scorer:
    def __call__(self, completions, **kwargs):
        return [1.0 for _ in completions]


def test_wrappers_keep_name_form_and_result():
    part = functools.partial(rewards.length_penalty, max_len=4)
    funcs = checked_reward_funcs([_strings, _async_strings, part, _Scorer()],
                                 ["_strings", "_async_strings", "length_penalty", "_Scorer"])  # fmt: skip
    assert [f.__name__ for f in funcs] == ["_strings", "_async_strings", "length_penalty", "_Scorer"]
    assert [inspect.iscoroutinefunction(f) for f in funcs] == [False, True, False, False]
    assert funcs[2](completion_ids=[[1, 2]], completions=["a"]) == [-0.5]
    assert funcs[3](completions=["a", "b"]) == [1.0, 1.0]
    with pytest.raises(TypeError, match="reward function '_strings' returned str 'yes' for completion 0 of 2"):
        funcs[0](completions=["a", "b"])
    with pytest.raises(TypeError, match="reward function '_async_strings' returned str 'yes' for completion 0 of 1"):
        asyncio.run(funcs[1](completions=["a"]))


def test_reward_models_are_left_to_trl():
    model = torch.nn.Linear(1, 1)
    assert checked_reward_funcs([model], ["m"]) == [model]


@pytest.mark.parametrize("func", [_strings, _async_strings], ids=["sync", "async"])
def test_trainer_names_the_function_that_returned_strings(func, tiny_model, tiny_tokenizer, cpu_training_args):
    from ordergrad_trl import OrderGradConfig, OrderGradTrainer

    def good(completions, **kwargs):
        return [0.0 for _ in completions]

    args = OrderGradConfig(**cpu_training_args, per_device_train_batch_size=4, num_generations=4, ordergrad_k=2,
                           max_completion_length=4, max_steps=1)  # fmt: skip
    data = Dataset.from_dict({"prompt": [f"Question {i}?" for i in range(4)]})
    trainer = OrderGradTrainer(model=tiny_model, reward_funcs=[good, func], args=args, train_dataset=data,
                               processing_class=tiny_tokenizer)  # fmt: skip
    assert trainer.reward_func_names == ["good", func.__name__]
    with pytest.raises(TypeError, match=rf"^reward function '{func.__name__}' returned str 'yes' for completion 0 of"):
        trainer.train()


# ------------------------------------------------------------------------------------------ the registry
def test_registry_names_bind_and_refuse_duplicates(cpu_training_args):
    from ordergrad_trl import OrderGradConfig

    assert list(REWARDS) == ["math", "format", "length"]
    assert all(REWARDS[name].func.__module__ == rewards.__name__ for name in REWARDS)
    args = OrderGradConfig(**cpu_training_args, num_generations=4, ordergrad_k=2, max_completion_length=10)
    funcs = get_reward_funcs(["length", "math", "format"], args)
    # the names TRL logs (trl.trainer.utils.get_callable_name: a partial by its function, else __name__)
    from trl.trainer.utils import get_callable_name

    assert [get_callable_name(f) for f in funcs] == ["length_penalty", "math_reward", "format_reward"]
    assert funcs[0].__name__ == "length_penalty" and funcs[0].__doc__ == rewards.length_penalty.__doc__
    assert funcs[0](completion_ids=[[1] * 5, [1] * 20]) == [-0.5, -1.0]  # bound to max_completion_length=10
    with pytest.raises(ValueError, match=r"reward_funcs \['nope'\] unknown: choose from \['math', 'format', 'length'\]"):
        get_reward_funcs(["math", "nope"], args)
    with pytest.raises(ValueError, match="reward 'math' is already registered"):
        register_reward("math", "again")(lambda completions, **kw: [0.0] * len(completions))
    assert REWARDS["math"].func is math_reward


# ------------------------------------------------------------------------------------------ golds
@pytest.mark.parametrize("gold,text", [("12", "12"), (12, "12"), (2.5, "2.5"), (np.int64(7), "7"), (None, ""),
                                       ("", "")])  # fmt: skip
def test_gold_text_of_strings_and_numbers(gold, text):
    assert gold_text(gold) == text


@pytest.mark.parametrize("gold", [["25"], {"value": 25}, ("25",), True, float("nan"), float("inf"), b"25", {"25"}])
def test_math_reward_refuses_container_golds_naming_the_row(gold):
    completions = [[{"role": "assistant", "content": r"\boxed{25}"}]] * 3
    prompts = [[{"role": "user", "content": f"Question {i}"}] for i in range(3)]
    with pytest.raises(ValueError, match=rf"^math_reward: the gold answer of row 2 of this batch \(id 'train-9'\) is "
                                         rf"a {type(gold).__name__} "):  # fmt: skip
        math_reward(completions, answer=["25", "25", gold], prompts=prompts, id=["train-7", "train-8", "train-9"])
    with pytest.raises(ValueError, match=r"row 1 of this batch \(prompt 'Question 1'\) is a"):  # no id column
        math_reward(completions[:2], answer=["25", gold], prompts=prompts[:2])


def test_math_reward_scores_number_golds_as_before():
    completions = [r"\boxed{25}", r"\boxed{2.5}", r"\boxed{3}"]
    assert math_reward(completions, answer=[25, 2.5, "3"]) == [1.0, 1.0, 1.0]
