"""Each registered estimator's settings for the shared tests, one entry per estimator.

Adding an estimator adds its entry here, plus what is its own (a loop oracle in test_estimators.ORACLE_CASES or
test_maxrl.MAXRL_ORACLES, and its unbiasedness claim in test_estimators_unbiased.py); a test fails until each exists.

- `params`: one parameter setting that fits groups of N = 6 (the shared contract, the plan's one-context call);
- `trainer`: (`OrderGradConfig` overrides, the parameters the trainer must call it with) for the 2-step training of
  test_trainer_zoo.py, on test_trainer's rewards and objective (`TRAINER_OBJECTIVE`, K = 4);
- `engine`: `ordergrad_*` settings that reach it through an RL engine's config, for verl's `compute_advantage`
  (test_verl.py) and SkyRL's `compute_advantages_and_returns` (test_skyrl.py).
"""

from __future__ import annotations

from dataclasses import dataclass

TRAINER_WEIGHTS = [0.1, 0.0, 0.3, 0.6]  # test_trainer's objective: ascending and asymmetric
TRAINER_OBJECTIVE = ",".join(map(str, TRAINER_WEIGHTS))


@dataclass(frozen=True)
class EstimatorCase:
    params: dict
    trainer: tuple[dict, dict]
    engine: tuple[dict, ...]


CASES = {
    "ordergrad": EstimatorCase(dict(objective="TopM:2", k=4), (dict(), dict(objective=TRAINER_OBJECTIVE, k=4)),
                               ({"objective": "MaxRL:3", "k": 3}, {"objective": "CVaR:0.5", "k": 4, "scale": "group"})),
    "grpo": EstimatorCase(dict(scale="group"), (dict(scale_rewards="group", ordergrad_objective="Mean"),
                                                dict(scale="group")), ({"scale": "group"}, {"scale": "batch"})),
    "rloo": EstimatorCase(dict(), (dict(ordergrad_objective="Mean"), dict()), ({},)),
    # chunks of 2 in training: strict bests
    "maxk_tang": EstimatorCase(dict(k=None), (dict(ordergrad_k=2, ordergrad_objective="ReMax"), dict(k=2)), ({"k": 2},)),
    # binary rewards in training: the second reward function (0 or 2) gets weight 0
    "passk_chen": EstimatorCase(dict(k=3), (dict(ordergrad_objective="ReMax", reward_weights=[1.0, 0.0]), dict(k=4)),
                                ({"k": 3},)),
    "pkpo": EstimatorCase(dict(k=3), (dict(ordergrad_objective="ReMax"), dict(k=4)), ({"k": 3},)),
    "rs_grpo": EstimatorCase(dict(beta=2.0), (dict(ordergrad_estimator_kwargs={"beta": 2.0}, ordergrad_objective="Mean"),
                                              dict(beta=2.0)), ({"estimator_kwargs": {"beta": -1.5}},)),
    "maxrl": EstimatorCase(dict(), (dict(ordergrad_objective="MaxRL:3", reward_weights=[1.0, 0.0]), dict()), ({},)),
    "maxrl_loo": EstimatorCase(dict(k=4), (dict(ordergrad_objective="MaxRL:4", reward_weights=[1.0, 0.0]), dict(k=4)),
                               ({"k": 5},)),
}
