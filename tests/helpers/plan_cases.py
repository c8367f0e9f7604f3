"""Bad settings that TRL's `OrderGradConfig` and the engines' `ordergrad_*` keys must refuse with the same text.

Also `trl_path`: what the TRL trainer computes for rows grouped by uid, the engines' (verl, SkyRL) oracle.

Each case: the `build_plan` keywords it sets (the rest are defaults) and the group size N (`num_generations`,
verl's `actor_rollout_ref.rollout.n`). The expected text is `build_plan`'s own (`expected_message`); tests/test_plan.py
checks that `OrderGradConfig` raises it, tests/test_verl.py and tests/test_skyrl.py that each engine's start-up check
and estimator do."""

from __future__ import annotations

import pytest
import torch

from ordergrad_trl.core.estimators import scale_advantages
from ordergrad_trl.core.plan import build_plan
from ordergrad_trl.core.prompt_weights import PROMPT_WEIGHTS, parse_prompt_weight


def weighing_settings() -> list[str]:
    """Every registered prompt weight but the one that weighs nothing (`none`), as the setting the shared tests run
    it with (`gaussian:0.4,0.2`): what a test about every weight iterates, so a new weight is tested by being
    registered."""
    return [row.setting for row in PROMPT_WEIGHTS.values() if parse_prompt_weight(row.setting) is not None]

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
    ({"prompt_weight": "hazard"}, 8),
    ({"prompt_weight": "gaussian:0.5"}, 8),
    ({"prompt_weight": "gaussian:1.5,0.2"}, 8),
    ({"prompt_weight": "curverl", "prompt_weight_window": -1}, 8),
]
# build_plan keyword -> OrderGradConfig field (an engine's key is <its algorithm config>.<field>, scale_rewards:
# ordergrad_scale_rewards)
TRL_FIELD = {"objective": "ordergrad_objective", "k": "ordergrad_k", "schedule": "ordergrad_schedule",
             "estimator": "ordergrad_estimator", "estimator_kwargs": "ordergrad_estimator_kwargs",
             "scale": "scale_rewards", "prompt_weight": "ordergrad_prompt_weight",
             "prompt_weight_window": "ordergrad_prompt_weight_window"}  # fmt: skip
ENGINE_KEY = {**TRL_FIELD, "scale": "ordergrad_scale_rewards"}


def expected_message(settings: dict, n: int) -> str:
    with pytest.raises(ValueError) as info:
        build_plan(**settings, num_generations=n)
    return str(info.value)


def case_id(case) -> str:
    return ",".join(f"{k}={v}" for k, v in case[0].items()).replace(" ", "")


def trl_path(rows, settings: dict, n: int, stage: int = 0) -> torch.Tensor:
    """What OrderGradTrainer computes for each group (its `(G, N)` view, one group per uid): `plan.advantages` of
    the active stage, then `scale_advantages` with scale_rewards (over the whole batch for "batch"), NaN -> 0."""
    plan = build_plan(**settings, num_generations=n)
    scores = torch.tensor([score for _, score in rows], dtype=torch.float64)
    out = torch.zeros(len(rows), dtype=torch.float64)
    for uid in dict.fromkeys(u for u, _ in rows):
        members = [r for r, (u, _) in enumerate(rows) if u == uid]
        grouped = scores[members][None]  # (1, n)
        adv = plan.advantages(grouped, plan.stages[stage])
        out[members] = scale_advantages(adv, grouped, plan.scale)[0] if plan.scale == "group" else adv[0]
    if plan.scale == "batch":
        out = scale_advantages(out, scores, "batch")
    return torch.nan_to_num(out, nan=0.0)
