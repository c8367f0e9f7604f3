"""Objective weights that cannot train in float32 are refused when the config is built (issue 28: `1e308,1e308` and
`1e-320,0` used to train with all-zero advantages and no word), checked against exact rational arithmetic."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
import torch

from ordergrad_trl.core.plan import build_plan

F32 = torch.finfo(torch.float32)
N = 5  # rollouts per prompt: small enough to enumerate every K-subset exactly


def exact_largest_advantage(weights: list[float], n: int) -> Fraction:
    """max |K * a_i| over every 0/1 group of n, with a_i = E[L(S) | i in S] - E[L(S) | S from the others] enumerated
    over K-subsets in exact rationals (the float weights converted exactly): no float rounding anywhere."""
    w = [Fraction(x) for x in weights]
    k = len(w)

    def mean_l(pool):
        subsets = list(itertools.combinations(pool, k))
        return sum(sum(wj * x for wj, x in zip(w, sorted(s))) for s in subsets) / len(subsets)

    largest = Fraction(0)
    for c in range(n + 1):
        group = [1] * c + [0] * (n - c)
        for i in range(n):
            others = group[:i] + group[i + 1 :]
            include = [sum(wj * x for wj, x in zip(w, sorted((group[i],) + s)))
                       for s in itertools.combinations(others, k - 1)]  # fmt: skip
            a = Fraction(sum(include), math.comb(n - 1, k - 1)) - mean_l(others)
            largest = max(largest, abs(k * a))
    return largest


def trainable(weights: list[float], n: int = N) -> bool:
    """The oracle's rule: every advantage finite in float32 with a finite square (the gradient norm), and the
    largest at least float32's smallest normal number."""
    largest = exact_largest_advantage(weights, n)
    return Fraction(F32.tiny) <= largest and largest * largest <= Fraction(F32.max)


def plan(**overrides):
    return build_plan(**{"num_generations": N, **overrides})


HOSTILE = [
    "1e308,1e308",  # the issue's: the float64 sums overflow
    "1e-320,0",  # the issue's: a subnormal weight, every advantage rounds to 0 in float32
    "1e-320,1e-320",
    "1.7e308,1.7e308,1.7e308",  # sums of three overflow
    "1e308,-1e308",  # differences overflow
    "-1e308,1e308,0",
    "3e38,0",  # finite in float64, above float32's largest
    "1e20,1e20",  # finite in float32, squares overflow
    "-2e19,0",
    "1e-39,0",  # a float32 subnormal
    "5e-324,0",  # the smallest float64 subnormal
    "1e-36,0",  # small but normal in float32: trains
    "1e15,-1e15",
    "1e18,0,0",
    "0,1",
    "-1,0.5,0.5",
    "2.2250738585072014e-308,0",  # float64's smallest normal: still zero in float32
]


@pytest.mark.parametrize("objective", HOSTILE)
def test_config_refuses_exactly_the_weights_that_cannot_train(objective):
    k = len(objective.split(","))
    want = trainable([float(x) for x in objective.split(",")])
    if want:
        assert plan(objective=objective, k=k).stages[0].weights.tolist() == [float(x) for x in objective.split(",")]
    else:
        with pytest.raises(ValueError, match=rf"^ordergrad_objective='{objective}' at ordergrad_k={k}, "
                                             rf"num_generations={N}: .*rescale them"):  # fmt: skip
            plan(objective=objective, k=k)


def test_the_oracle_is_not_trivial():
    # both verdicts occur, so the parametrized test checks refusals and acceptances
    verdicts = {trainable([float(x) for x in o.split(",")]) for o in HOSTILE}
    assert verdicts == {True, False}
    assert not trainable([1e308, 1e308]) and not trainable([1e-320, 0.0]) and trainable([0.0, 1.0])


@pytest.mark.parametrize("objective,why", [
    ("-0.0,0", "all-zero weights"),  # negative zero is zero
    ("-0.0,-0.0", "all-zero weights"),
    ("nan,1", "weights must be finite"),
    ("1,inf", "weights must be finite"),
    ("-inf,1", "weights must be finite"),
    ("1e309,0", "weights must be finite"),  # parses to inf
])  # fmt: skip
def test_zero_and_non_finite_weights_name_the_field(objective, why):
    with pytest.raises(ValueError, match=rf"ordergrad_objective='{objective}'.*{why}"):
        plan(objective=objective, k=2)


def test_schedule_and_per_reward_entries_are_named():
    with pytest.raises(ValueError, match=r"^ordergrad_schedule\[1\]='3 1e308,1e308@2': objective='1e308,1e308' at "
                                         r"K=2, num_generations=5: its advantages overflow float64"):  # fmt: skip
        plan(schedule=["0 ReMax@4", "3 1e308,1e308@2"])
    with pytest.raises(ValueError, match=r"^ordergrad_reward_objectives\[1\]='1e-320,0@2': objective='1e-320,0' at "
                                         r"K=2, num_generations=5: its largest advantage is .* below float32's"):  # fmt: skip
        plan(reward_objectives=["TopM:2@4", "1e-320,0@2"])


def test_order_grad_config_refuses_them_at_construction(cpu_training_args):
    from ordergrad_trl import OrderGradConfig

    for objective, k in (("1e308,1e308", 2), ("1e-320,0", 2)):
        with pytest.raises(ValueError, match=rf"ordergrad_objective='{objective}' at ordergrad_k={k}"):
            OrderGradConfig(**cpu_training_args, num_generations=4, ordergrad_objective=objective, ordergrad_k=k)


def test_every_preset_still_trains_at_small_and_large_groups():
    from ordergrad_trl.core.objectives import PRESETS

    for preset in PRESETS.values():  # each example is valid at K=4 (the docs' table)
        for n in (5, 64, 1024):
            plan(objective=preset.example, k=4, num_generations=n)


@pytest.mark.parametrize("weights,why", [
    ([1e308], "are inf in float32"), ([1.0, 3.5e38], "are inf in float32"), ([-1e39, 1.0], "are inf in float32"),
    ([1e-320], "are all zero in float32"), ([1e-46, 0.0], "are all zero in float32"),
])  # fmt: skip
def test_reward_weights_that_float32_cannot_hold_are_refused(cpu_training_args, weights, why):
    from ordergrad_trl import OrderGradConfig

    assert torch.tensor(weights, dtype=torch.float32).isinf().any() or not torch.tensor(weights).float().any()
    with pytest.raises(ValueError, match=rf"^reward_weights .* {why}, the dtype TRL keeps them in"):
        OrderGradConfig(**cpu_training_args, reward_weights=weights)
    fine = [1e38, 1e-44]  # both representable in float32
    assert OrderGradConfig(**cpu_training_args, reward_weights=fine).reward_weights == fine
