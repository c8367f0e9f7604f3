"""ordergrad-trl: OrderGrad order-statistic objectives (Max@K, Top-M@K, CVaR, ...) for TRL's GRPO trainer.

Three layers, each a subpackage that imports only the ones before it:

- `core`: the math in pure torch (objectives, advantages, estimators, schedules); no TRL import.
- `training`: the TRL integration (`OrderGradConfig`, `OrderGradTrainer`).
- `tasks`: the math task (datasets, math-verify rewards, the default model).

The trainer reads the math reward's failure counters from `tasks.rewards`; nothing else crosses layers.
"""

import importlib
import importlib.abc
import importlib.util
import sys

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


# Modules that lived at the top level before the layers (0.1.0 users import e.g. `ordergrad_trl.estimators`):
# the old name is the same module object as the new one, imported on first use.
_MOVED = {
    **{name: f"core.{name}" for name in ("objectives", "advantage", "estimators", "pathwise", "schedule")},
    **{name: f"training.{name}" for name in ("config", "trainer")},
    **{name: f"tasks.{name}" for name in ("data", "arithmetic", "rewards", "models")},
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        prefix, _, name = fullname.rpartition(".")
        if prefix != __name__ or name not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module(f"{__name__}.{_MOVED[spec.name.rpartition('.')[2]]}")

    def exec_module(self, module):
        pass  # already executed under its new name


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())
