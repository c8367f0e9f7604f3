"""ordergrad-trl: OrderGrad order-statistic objectives (Max@K, Top-M@K, CVaR, ...) for TRL's GRPO trainer."""

from .advantage import lstat_advantage, lstat_value
from .objectives import rank_weights

__version__ = "0.1.0"

# The trainer pulls in TRL (seconds to import); load it on first use so the math stays a light import.
_LAZY = {"OrderGradConfig": ".config", "ObjectiveStage": ".schedule", "OrderGradTrainer": ".trainer"}

__all__ = ["rank_weights", "lstat_value", "lstat_advantage", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
