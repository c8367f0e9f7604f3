"""ordergrad-trl: OrderGrad order-statistic objectives (Max@K, Top-M@K, CVaR, ...) for TRL's GRPO trainer.

Layers, each a subpackage that imports only the layers below it (`tests/test_layout.py` checks it):

- `core`: the math in pure torch (objectives, the objective plan, advantages, estimators, statistics); no TRL.
- `training` (on `core`): the TRL integration (`OrderGradConfig`, `OrderGradTrainer`).
- `tasks` (on `core`): the math task (datasets, the math-verify worker pool, rewards, the default model).
- `evaluation` (on `core` and `tasks`): sampling, scoring and reports of checkpoints (`ordergrad-eval`).
- `integrations` (on `core` and `tasks`): other trainers, e.g. verl's advantage-estimator plugin.

The math reward reports its own time-outs through TRL's `log_metric`, so `training` needs nothing from `tasks`.
"""

import importlib

from .core.advantage import lstat_advantage, lstat_value
from .core.objectives import rank_weights

__version__ = "0.1.0"

# The trainer pulls in TRL (seconds to import); load it on first use so the math stays a light import.
_LAZY = {"OrderGradConfig": ".training.config", "ObjectiveStage": ".core.schedule", "OrderGradTrainer": ".training.trainer"}

__all__ = ["rank_weights", "lstat_value", "lstat_advantage", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
