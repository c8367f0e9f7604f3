"""The one estimator registry: `@register_estimator(name, ...)` at each definition; every list is derived from it.

An estimator is a function `fn(rewards (..., N), *, params...) -> advantages (..., N)`. Registering it records its
keyword parameters and defaults (read from its signature), which of them the objective stage fills
(`objective` gets the stage's rank weights, `k` its K), and the facts the docs table and the config help show (formula, what it is unbiased for,
centering, rewards it accepts, source) and its contract: the fewest valid rewards a group needs (`min_group`), what
NaN rewards do (`nan`, a key of `NAN_RULES`), whether it is unbiased (`unbiased`) and for which L-statistic
(`target`). The config's `ordergrad_estimator` help, docs/estimators.md's table
(`estimator_table()`), the plan's checks, the verl adapter and the tests all iterate `ESTIMATORS`, the read-only
view of a `Registry` (core/registry_base.py); a test lends a row with `_ROWS.registered(name, row)`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

from ..advantage import _float64_device, _out_dtype
from ..registry_base import Registry
from ..schedule import ObjectiveStage

__all__ = [
    "ESTIMATORS",
    "NAN_RULES",
    "Estimator",
    "bind_estimator",
    "estimator_help",
    "estimator_name",
    "estimator_params",
    "estimator_table",
    "get_estimator",
    "register_estimator",
]

# What a NaN reward (an unscorable rollout) does, by the name an estimator's registry row declares (`nan=`)
NAN_RULES = {
    "drop": "its advantage is 0 and it is left out: the rest of the group is computed as a group of its own size",
    "chunk": "its advantage is 0 and it is left out of its chunk's statistics; each chunk keeps its size k (the "
             "factor k)",
}

# keyword parameter -> the `ObjectiveStage` attribute that fills it: an estimator taking `objective` is handed the
# stage's rank weights (derived once, when the stage was built), never the string to parse again
STAGE_FILLS = {"objective": "weights", "k": "k"}


@dataclass(frozen=True)
class Estimator:
    """A registered estimator: its function, keyword parameters with defaults, which of them the context fills
    (`reads`), and what the docs table says about it."""

    name: str
    fn: Callable[..., torch.Tensor]
    params: Mapping[str, Any]
    reads: tuple[str, ...]  # the parameters the stage fills (`STAGE_FILLS`)
    advantage: str  # A_i for a group of n valid rewards, as the docs table shows it
    unbiased_for: str  # the gradient it estimates without bias ("nothing (...)" for a biased one)
    centered: str  # "exactly" or "no (>= 0)", ...
    binary: bool  # True: rewards must be 0/1 (NaN allowed); others are refused by name
    source: str  # paper(s)
    summary: str  # a few words for the config help
    # the contract (tests/test_estimators_contract.py and test_estimators_unbiased.py read it; None: not declared)
    min_group: Callable[[Mapping[str, Any]], int] | None = None  # params -> fewest valid rewards with advantages
    nan: str = "drop"  # a key of NAN_RULES
    unbiased: bool | None = None  # whether E[(1/N) sum_i A_i grad log p(x_i)] = grad J of `target`, at every N
    target: Callable[[Mapping[str, Any], int], tuple[str, int]] | None = None  # (params, N) -> (objective, K)

    def group_minimum(self, **params) -> int:
        """The fewest valid (non-NaN) rewards a group needs: a group with fewer gets all 0, and a call whose group
        width N is below it raises `ValueError` or gives all 0."""
        return self.min_group({**self.params, **params})

    def targets(self, n: int, **params) -> tuple[str, int] | None:
        """The L-statistic `(objective, K)` it estimates the gradient of on groups of `n` rollouts with `params`
        (None: none; without bias only if `unbiased`): what the comparison tools evaluate each arm on."""
        return None if self.target is None else self.target({**self.params, **params}, n)

    @property
    def options(self) -> dict[str, Any]:
        """Its own parameters (not filled by the context), with defaults."""
        return {name: value for name, value in self.params.items() if name not in self.reads}

    def __call__(self, rewards: torch.Tensor, stage: ObjectiveStage | None = None, **params) -> torch.Tensor:
        """`(..., N)` rewards -> `(..., N)` advantages: with an `ObjectiveStage` (how trainers call every estimator
        alike: its weights, K and options), or with keyword parameters as the function itself takes them."""
        if stage is None:
            return self.fn(rewards, **params)
        if params:
            raise TypeError(f"{self.name}: pass either a stage or keyword parameters, not both")
        return self.fn(rewards, **{name: getattr(stage, STAGE_FILLS[name]) for name in self.reads}, **stage.options)


def _defined_by(e: Estimator) -> str:
    return f"{e.fn.__module__}.{e.fn.__qualname__}"


# the same function again (a module reloaded) replaces its row; another one under a taken name is refused
_ROWS: Registry[Estimator] = Registry("estimator", holder=_defined_by,
                                      same=lambda taken, row: _defined_by(taken) == _defined_by(row))
_REGISTRY = _ROWS.rows
ESTIMATORS: Mapping[str, Estimator] = _ROWS.view  # name -> Estimator, in registration order


def register_estimator(
    name: str,
    *,
    advantage: str = "",
    unbiased_for: str = "",
    centered: str = "",
    source: str = "",
    summary: str = "",
    binary: bool = False,
    min_group: Callable[[Mapping[str, Any]], int] | None = None,
    nan: str = "drop",
    unbiased: bool | None = None,
    target: Callable[[Mapping[str, Any], int], tuple[str, int]] | None = None,
) -> Callable[[Callable], Callable]:
    """Decorator registering `fn` under `name` (lower case); a name registered by another function raises.

    The keyword facts fill the docs table and the config help; `binary=True` marks an estimator that refuses rewards
    other than 0/1. The contract: `min_group(params)` the fewest valid rewards a group needs (fewer: all 0),
    `nan` what a NaN reward does (`NAN_RULES`), `unbiased` and `target(params, N)`, the L-statistic
    `(objective, K)` whose gradient it estimates. The package's own estimators give them all, and the shared tests
    check each claim (tests/test_estimators_contract.py, test_estimators_unbiased.py).
    """
    _ROWS.check_name(name)
    if nan not in NAN_RULES:
        raise ValueError(f"estimator {name!r}: nan must be one of {', '.join(NAN_RULES)}, got {nan!r}")

    def register(fn: Callable) -> Callable:
        signature = inspect.signature(fn)
        params = {p.name: p.default for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY}
        reads = tuple(p for p in STAGE_FILLS if p in params)
        row = Estimator(name, fn, MappingProxyType(params), reads, advantage, unbiased_for, centered, binary, source,
                        summary, min_group, nan, unbiased, target)  # fmt: skip
        _ROWS.check(name, row)  # a name another function holds is refused before the signature is judged
        if any(value is inspect.Parameter.empty for value in params.values()):
            raise ValueError(f"estimator {name!r}: every keyword-only parameter needs a default")
        _ROWS.add(name, row)
        return fn

    return register


def get_estimator(name: str) -> Callable[..., torch.Tensor]:
    """The function registered under `name` (case-insensitive); `ValueError` listing the valid names otherwise."""
    return _lookup(name).fn


def estimator_name(name, field: str = "ordergrad_estimator") -> str:
    """The registered name `name` means (case and surrounding spaces ignored): the one normaliser of estimator names
    (the config, the plan, verl and `get_estimator` use it). `ValueError` naming `field` and the valid names."""
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in _REGISTRY:
        raise ValueError(f"{field}={name!r} is unknown; valid names: {', '.join(_REGISTRY)}.")
    return key


def _lookup(name: str) -> Estimator:
    return _REGISTRY[estimator_name(name, "estimator")]


def estimator_params(name: str) -> dict[str, object]:
    """The keyword parameters of estimator `name` and their defaults."""
    return dict(_lookup(name).params)


def bind_estimator(name: str, *, num_generations: int | None = None, **params) -> Callable[..., torch.Tensor]:
    """`rewards (G, N) -> advantages (G, N)` with `params` fixed, checked now rather than at the first batch.

    Args:
        name: a key of `ESTIMATORS`.
        num_generations: the group size N, if known: the estimator is then run once on a zero group of that size,
            so that a bad parameter or an N that does not fit (e.g. `ordergrad` with N <= K) raises here.
        **params: the estimator's keyword parameters (see `estimator_params(name)`); unknown names raise.

    Raises:
        ValueError: unknown estimator or parameter name, or a bad parameter value.
    """
    spec = _lookup(name)
    unknown = sorted(set(params) - set(spec.params))
    if unknown:
        raise ValueError(
            f"Estimator {spec.name!r} takes no parameter(s) {unknown}; it accepts: {', '.join(spec.params) or 'none'}"
        )
    bound = functools.partial(spec.fn, **params)
    if num_generations is not None:
        bound(torch.zeros(1, num_generations, dtype=torch.float64))
    return bound


def estimator_help() -> str:
    """The names and summaries for `OrderGradConfig.ordergrad_estimator`'s help."""
    return _ROWS.help(lambda e: f"{e.name} ({e.summary})")


def estimator_table() -> str:
    """The markdown table of docs/estimators.md, one row per registered estimator."""
    rows = ["| name | advantage A_i (group of n valid rewards) | unbiased for | centered | rewards | source |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for e in _REGISTRY.values():
        params = ", ".join(f"{p}={v!r}" for p, v in e.params.items())
        name = f"`{e.name}`" + (f" ({params})" if params else "")
        rows.append(f"| {name} | {e.advantage} | {e.unbiased_for} | {e.centered} | {'0/1' if e.binary else 'any'} "
                    f"| {e.source} |")  # fmt: skip
    return "\n".join(rows)


# ------------------------------------------------------------------------ helpers every definition shares


def prepare(rewards, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 `(..., N)` copy of the rewards, and an empty tensor with the device and dtype to return (for
    `.to(out.dtype).to(out.device)`, cast first: MPS cannot hold float64); raises on a scalar or +-inf."""
    if not isinstance(rewards, torch.Tensor):
        rewards = torch.as_tensor(rewards)
    if rewards.dim() == 0:
        raise ValueError(f"{name}: rewards must have shape (G, N) with each group on the last axis, got a scalar")
    if rewards.is_complex() or rewards.dtype == torch.bool:
        raise ValueError(f"{name}: rewards must be real numbers, got dtype {rewards.dtype}")
    out = torch.empty(0, dtype=_out_dtype(rewards), device=rewards.device)
    r = rewards.to(_float64_device(rewards)).to(torch.float64)
    if bool(torch.isinf(r).any()):
        raise ValueError(f"{name}: rewards of shape {tuple(r.shape)} contain +-inf; use NaN to mark unscorable")
    return r, out


def check_k(k, name: str, minimum: int = 1) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < minimum:
        raise ValueError(f"{name}: k must be an integer >= {minimum}, got {k!r}")
    return k


def check_binary(r: torch.Tensor, name: str, instead: str) -> None:
    """Refuse rewards other than 0, 1 and NaN, naming the estimator and what to use `instead`."""
    valid = ~torch.isnan(r)
    if not bool(((r[valid] == 0) | (r[valid] == 1)).all()):
        raise ValueError(f"{name}: rewards must be binary (0 or 1, NaN for unscorable); {instead}")
