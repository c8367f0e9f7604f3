"""ordergrad-trl: OrderGrad order-statistic objectives (Max@K, Top-M@K, CVaR, ...) for TRL's GRPO trainer.

Layers, each a subpackage that imports only the layers below it (`tests/test_layout.py` checks it):

- `core`: the math in pure torch (objectives, the objective plan, advantages, estimators, statistics); no TRL.
- `tasks` (on `core`): the math task (datasets, the math-verify worker pool, rewards, the default model).
- `evaluation` (on `core` and `tasks`): sampling, scoring and reports of checkpoints (`ordergrad-eval`), and the run
  files' safety (one writer per folder, no link followed, atomic replaces) that training reuses.
- `integrations` (on `core` and `tasks`): other trainers, e.g. verl's advantage-estimator plugin.
- `training` (on all of them but `integrations`): the TRL integration (`OrderGradConfig`, `OrderGradTrainer`); it
  takes its output_dir's lock and safe writes from `evaluation` and checks the reward settings of `tasks` at start-up.

The math reward reports its own time-outs through TRL's `log_metric`.
"""

import importlib

__version__ = "0.1.0"

# Nothing is imported eagerly, so `import ordergrad_trl.integrations.verl` (verl's plugin loader, which hides
# import errors) reaches the adapter's own loud error handling whatever fails underneath.
_LAZY = {
    "rank_weights": ".core.objectives", "lstat_value": ".core.advantage", "lstat_advantage": ".core.advantage",
    "OrderGradConfig": ".training.config", "ObjectiveStage": ".core.schedule", "OrderGradTrainer": ".training.trainer",
}  # fmt: skip
_LAYERS = ("core", "tasks", "evaluation", "integrations", "training")

__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    if name in _LAYERS:  # `import ordergrad_trl; ordergrad_trl.core.rank_weights` as with eager imports
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_LAZY, *_LAYERS})
