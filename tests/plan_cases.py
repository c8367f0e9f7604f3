"""Bad settings that TRL's `OrderGradConfig` and verl's `algorithm.ordergrad_*` keys must refuse with the same text.

Each case: the `build_plan` keywords it sets (the rest are defaults) and the group size N (`num_generations`,
verl's `actor_rollout_ref.rollout.n`). The expected text is `build_plan`'s own (`expected_message`); tests/test_plan.py
checks that `OrderGradConfig` raises it, tests/test_verl.py that verl's start-up check and estimator do."""

from __future__ import annotations

import pytest

from ordergrad_trl.core.plan import build_plan

BAD_SETTINGS = [
    ({"k": 8}, 8),  # K must be < N
    ({"k": 0}, 8),
    ({"objective": "Bogus"}, 8),
    ({"objective": "TopM:5", "k": 4}, 8),
    ({"objective": "0,0,0,0", "k": 4}, 8),
    ({"objective": "MaxRL:5", "k": 4}, 8),
    ({"estimator": "dapo"}, 8),
    ({"estimator": "rs_grpo", "estimator_kwargs": {"gamma": 1}}, 8),
    ({"estimator": "grpo", "estimator_kwargs": {"scale": "group"}}, 8),
    ({"estimator": "maxk_tang", "k": 3}, 8),  # N not a multiple of k
    ({"estimator": "maxrl", "schedule": ["0 Mean@2"]}, 8),  # a schedule with an estimator that reads neither
    ({"schedule": ["5 ReMax@2"]}, 8),  # must start at step 0
    ({"schedule": ["0 ReMax@8"]}, 8),
    ({"scale": "std"}, 8),
]
# build_plan keyword -> OrderGradConfig field (verl's key is algorithm.<field>, scale_rewards: ordergrad_scale_rewards)
TRL_FIELD = {"objective": "ordergrad_objective", "k": "ordergrad_k", "schedule": "ordergrad_schedule",
             "estimator": "ordergrad_estimator", "estimator_kwargs": "ordergrad_estimator_kwargs",
             "scale": "scale_rewards"}  # fmt: skip
VERL_KEY = {**TRL_FIELD, "scale": "ordergrad_scale_rewards"}


def expected_message(settings: dict, n: int) -> str:
    defaults = dict(objective=None, k=None, schedule=None, reward_objectives=None, estimator="ordergrad",
                    estimator_kwargs=None, scale="none")  # fmt: skip
    with pytest.raises(ValueError) as info:
        build_plan(**{**defaults, **settings}, num_generations=n)
    return str(info.value)


def case_id(case) -> str:
    return ",".join(f"{k}={v}" for k, v in case[0].items()).replace(" ", "")
