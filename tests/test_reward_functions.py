"""The TRL reward functions `math_reward`, `format_reward` and `length_penalty` under TRL 1.16's calling convention."""

from __future__ import annotations

import functools

import pytest

from ordergrad_trl.tasks.rewards import format_reward, length_penalty, math_reward


def trl_kwargs(completions, **columns):
    """The keyword arguments TRL 1.16's `_calculate_rewards` passes a reward function."""
    return dict(
        prompts=["q"] * len(completions), completions=completions, completion_ids=[[1, 2, 3]] * len(completions),
        trainer_state=None, log_extra=lambda *a: None, log_metric=lambda *a: None, **columns,
    )


def test_math_reward_under_trl_calling_convention():
    completions = [
        r"\boxed{2}",
        [{"role": "assistant", "content": r"The answer is \boxed{2}."}],
        [{"role": "assistant", "content": r"\boxed{1}"}, {"role": "user", "content": "sure?"},
         {"role": "assistant", "content": [{"type": "text", "text": r"Yes, \boxed{3}"}]}],
        r"\boxed{27}",
        r"\boxed{2}",
        r"\boxed{None}",
    ]
    out = math_reward(**trl_kwargs(completions, answer=["2", "2", "2", 27.0, "", None]))
    assert out == [1.0, 1.0, 0.0, 1.0, None, None]
    assert math_reward.__name__ == "math_reward"


@pytest.mark.parametrize(
    "text, want",
    [
        (r"so \boxed{\frac{1}{2}}.", 1.0),
        (r"\boxed{\{1,2\}}", 1.0),
        (r"\boxed {5}", 1.0),
        ("42", 0.0),
        (r"\boxed{1} then \boxed{2}", 0.0),
        (r"\boxed{\frac{1}{2}", 0.0),
        (r"\boxed 5", 0.0),
    ],
)
def test_format_reward(text, want):
    assert format_reward(**trl_kwargs([text, [{"role": "assistant", "content": text}]])) == [want, want]


def test_length_penalty():
    reward = functools.partial(length_penalty, max_len=4)
    kwargs = trl_kwargs(["a", "b", "c"])
    kwargs["completion_ids"] = [[], [1, 2], [1, 2, 3, 4, 5]]
    assert reward(**kwargs) == [0.0, -0.5, -1.0]
    assert reward.func.__name__ == "length_penalty"  # TRL names a partial by its function
    with pytest.raises(ValueError, match="max_len"):
        length_penalty(**kwargs)
