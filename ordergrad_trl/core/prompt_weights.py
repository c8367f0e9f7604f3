"""Prompt weights: which prompts carry the gradient, as a stage after the estimator (rank weights say which rollouts).

A prompt weight multiplies every advantage of a group by one number w(p_hat) of the group's success rate p_hat:

    advantages (G, N) -> w(p_hat) (G, 1) * advantages (G, N)        # then scale_rewards, as for every estimator

`p_hat` is the mean of the group's scorable rewards (NaN left out): the success rate for 0/1 rewards. Rewards outside
[0, 1] are refused by name (`ordergrad_prompt_weight`); `inverse` takes 0/1 rewards only, as MaxRL does. A group with
no scorable reward gets weight 0.

Each weight is registered where it is defined, `@register_prompt_weight(name, ...)`, with one signature,

    fn(p_hat (G,) float64, *, bins: int, reference: (M,) float64, **params) -> (G,) float64

where `bins` is the largest group size of the batch plus 1 and `reference` the success rates the weight is measured
against (CurveRL's window; stateless weights ignore both). `PROMPT_WEIGHTS` maps names to rows (formula, stateful,
source, what it does to the objective); the config help, docs/estimators.md's table and the tests derive from it.
`PromptWindow` is the one piece of state (CurveRL's sliding window of past batches' success rates). Pure torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from .registry_base import Registry

__all__ = [
    "DEFAULT_PROMPT_WEIGHT",
    "DEFAULT_WINDOW",
    "PROMPT_WEIGHTS",
    "PromptWeight",
    "PromptWeightSpec",
    "PromptWindow",
    "parse_prompt_weight",
    "prompt_weight_help",
    "prompt_weight_table",
    "register_prompt_weight",
    "success_rates",
]

DEFAULT_PROMPT_WEIGHT = "none"
DEFAULT_WINDOW = 10  # CurveRL's `curverl_pool_num`
FIELD = "ordergrad_prompt_weight"
WINDOW_FIELD = "ordergrad_prompt_weight_window"


@dataclass(frozen=True)
class PromptWeight:
    """A registered prompt weight: its function, its parameters' names (`gaussian:MU,SIGMA` -> ("mu", "sigma")) and
    the facts of the docs table."""

    name: str
    fn: Callable[..., torch.Tensor]
    params: tuple[str, ...]
    formula: str  # w(p_hat), as the docs table shows it
    stateful: bool  # True: needs the window of past batches (`PromptWindow`)
    rewards: str  # the rewards it takes: "0/1", "[0, 1]" or "any" (no p_hat needed)
    objective: str  # what it does to the objective J (for 0/1 rewards, with a deterministic w(p))
    source: str
    summary: str
    example: tuple[float, ...] = ()  # parameter values the shared tests run it with (tests/test_prompt_weight_rows.py)

    @property
    def setting(self) -> str:
        """The `ordergrad_prompt_weight` setting the shared tests run it with: its name and `example`
        (`gaussian:0.4,0.2`)."""
        return self.name + (":" + ",".join(map(str, self.example)) if self.example else "")


# the same function again (a module reloaded) replaces its row; another one under a taken name is refused
_ROWS: Registry[PromptWeight] = Registry("prompt weight", holder=lambda row: row.fn.__qualname__,
                                         same=lambda taken, row: taken.fn.__qualname__ == row.fn.__qualname__)
_REGISTRY = _ROWS.rows
PROMPT_WEIGHTS: Mapping[str, PromptWeight] = _ROWS.view


def register_prompt_weight(name: str, *, params: tuple[str, ...] = (), formula: str, stateful: bool = False,
                           rewards: str = "[0, 1]", objective: str, source: str, summary: str,
                           example: tuple[float, ...] = ()):  # fmt: skip
    """Decorator registering `fn` under `name` (lower case); a name taken by another function raises. `example`: one
    value per parameter, with which every shared test runs the weight (a weight with parameters needs one)."""
    _ROWS.check_name(name)

    def register(fn):
        if rewards not in ("0/1", "[0, 1]", "any"):
            raise ValueError(f"prompt weight {name!r}: rewards must be '0/1', '[0, 1]' or 'any', got {rewards!r}")
        if len(example) != len(params):
            raise ValueError(f"prompt weight {name!r}: example must give one value per parameter {params}, got "
                             f"{example!r}")
        _ROWS.add(name, PromptWeight(name, fn, params, formula, stateful, rewards, objective, source, summary,
                                     tuple(example)))  # fmt: skip
        return fn

    return register


@dataclass(frozen=True)
class PromptWeightSpec:
    """A parsed `ordergrad_prompt_weight` setting: the registered weight, its parameters and the window (batches)."""

    name: str
    params: tuple[float, ...] = ()
    window: int = DEFAULT_WINDOW

    @property
    def row(self) -> PromptWeight:
        return _REGISTRY[self.name]

    @property
    def stateful(self) -> bool:
        return self.row.stateful

    def __str__(self) -> str:
        return self.name + (":" + ",".join(f"{p:g}" for p in self.params) if self.params else "")

    def weights(self, p_hat: torch.Tensor, bins: int, reference: torch.Tensor | None = None) -> torch.Tensor:
        """`(G,)` success rates (NaN: no scorable reward) -> `(G,)` float64 weights; `reference` (the window's rates;
        None while it holds none) defaults to the batch's own rates, CurveRL's rule; only stateful weights read it."""
        if reference is None:
            reference = inner(p_hat)
        w = self.row.fn(p_hat.nan_to_num(0.0), bins=bins, reference=reference,
                        **dict(zip(self.row.params, self.params)))  # fmt: skip
        return torch.where(torch.isnan(p_hat), 0.0, w)


def _form(row: PromptWeight) -> str:
    """How a setting spells the weight: `gaussian:MU,SIGMA`."""
    return row.name + (":" + ",".join(p.upper() for p in row.params) if row.params else "")


def valid_forms() -> str:
    return " | ".join(map(_form, _REGISTRY.values()))


def parse_prompt_weight(setting, window=None) -> PromptWeightSpec | None:
    """The one parser of `ordergrad_prompt_weight` (and `ordergrad_prompt_weight_window`): `None` for `"none"` (the
    stage is skipped: advantages unchanged, bit for bit), else the spec. `ValueError` naming the field and the valid
    forms for anything else."""
    if window is None:
        window = DEFAULT_WINDOW
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"{WINDOW_FIELD} must be an integer >= 0 (batches; 0: the current batch alone), got "
                         f"{window!r}.")  # fmt: skip
    if setting is None:
        setting = DEFAULT_PROMPT_WEIGHT
    if not isinstance(setting, str):
        raise ValueError(f"{FIELD} must be a string, one of {valid_forms()}, got {setting!r}.")
    name, _, rest = setting.strip().partition(":")
    name = name.strip().lower()
    row = _REGISTRY.get(name)
    if row is None:
        raise ValueError(f"{FIELD}={setting!r} is unknown; valid forms: {valid_forms()}.")
    values = [v.strip() for v in rest.split(",")] if rest.strip() else []
    if len(values) != len(row.params):
        need = f"{len(row.params)} parameter(s) {name}:{','.join(p.upper() for p in row.params)}" if row.params \
            else "no parameters"  # fmt: skip
        raise ValueError(f"{FIELD}={setting!r}: {name!r} takes {need}; valid forms: {valid_forms()}.")
    try:
        params = tuple(float(v) for v in values)
    except ValueError:
        raise ValueError(f"{FIELD}={setting!r}: parameters must be numbers; valid forms: {valid_forms()}.") from None
    check = _CHECKS.get(name)
    if check is not None:
        why = check(*params)
        if why:
            raise ValueError(f"{FIELD}={setting!r}: {why}.")
    if name == DEFAULT_PROMPT_WEIGHT:
        return None
    return PromptWeightSpec(name, params, window)


def success_rates(rewards: torch.Tensor, spec: PromptWeightSpec) -> torch.Tensor:
    """`(G, N)` rewards (NaN: unscorable) -> `(G,)` float64 p_hat, the mean of each group's scorable rewards (NaN when
    it has none). Rewards outside [0, 1], or other than 0/1 for a binary weight, raise `ValueError` naming the field."""
    r = rewards.detach().to(torch.float64)
    valid = ~torch.isnan(r)
    binary = spec.row.rewards == "0/1"
    inside = (r[valid] == 0) | (r[valid] == 1) if binary else (r[valid] >= 0) & (r[valid] <= 1)
    if spec.row.rewards != "any" and not bool(inside.all()):
        bad = r[valid][~inside][0].item()
        need = "0 or 1 (MaxRL's success rate)" if binary else "in [0, 1] (p_hat is the group's mean reward)"
        raise ValueError(
            f"{FIELD}={str(spec)!r}: rewards must be {need}, got {bad!r}. Set reward_weights so the weighted sum of the "
            "reward functions stays in range, threshold the rewards (override compute_advantages), or use "
            f"{FIELD}='none'."
        )
    return torch.nansum(r, dim=-1) / valid.sum(-1)  # 0/0 = NaN: no scorable reward


def inner(p_hat: torch.Tensor) -> torch.Tensor:
    """The rates strictly inside (0, 1): the groups that carry a signal, the only ones a window keeps."""
    return p_hat[(p_hat > 0) & (p_hat < 1)]


# ------------------------------------------------------------------------------------------ the weights


@register_prompt_weight(
    "none",
    formula="1",
    rewards="any",
    objective="J unchanged",
    source="",
    summary="default; the advantages as the estimator gives them",
)
def none(p_hat: torch.Tensor, *, bins: int, reference: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(p_hat)


@register_prompt_weight(
    "inverse",
    formula="1 / p_hat (0 when p_hat = 0)",
    rewards="0/1",
    objective="dG/dp = J'(p) / p; with the mean (GRPO unscaled: MaxRL) G = log pass@1, truncated (bias below)",
    source="MaxRL (Tajwar, Zeng et al. 2026)",
    summary="MaxRL's 1/p_hat, 0/1 rewards",
)
def inverse(p_hat: torch.Tensor, *, bins: int, reference: torch.Tensor) -> torch.Tensor:
    return torch.where(p_hat > 0, 1.0 / p_hat.clamp(min=1e-300), 0.0)


@register_prompt_weight(
    "curverl",
    formula="f_ref / F_ref at bin floor(p_hat B) of a histogram with B = N+1 bins of the window's rates; 0 for "
    "p_hat in {0, 1} or an empty bin",
    stateful=True,
    objective="dG/dp = J'(p) f_ref(p) / F_ref(p): with the mean, G = log F_ref(pass@1)",
    source="CurveRL (Sun, Zhao, Xin, Long, Su 2026)",
    summary="CurveRL's reverse hazard rate of a window of past pass rates",
)
def curverl(p_hat: torch.Tensor, *, bins: int, reference: torch.Tensor) -> torch.Tensor:
    """w = mass / cdf of the reference's histogram at p_hat's bin: counts[b] / (counts[0] + ... + counts[b]), exact in
    counts (CurveRL divides by a cdf clamped at 1e-6, which only a reference of over 10^6 rates could reach).

    The bin is floor(p_hat B) as in exact arithmetic: a rate on a bin's edge (c/n with n | cB, seen when groups differ
    in size or lose rollouts to NaN, e.g. 1/3 with B = 6) falls in the upper bin, which a product rounded down
    (1/3 * 6 = 1.999...) would miss; hence the 1e-9 before the floor."""
    def bin_of(p):  # (M,) -> (M,) int64 in 0..bins-1
        return (p.clamp(0, 1) * bins + 1e-9).floor().long().clamp(0, bins - 1)

    counts = torch.bincount(bin_of(reference), minlength=bins).to(torch.float64)  # (bins,)
    cumulative = counts.cumsum(0)
    ratio = torch.where(counts > 0, counts / cumulative.clamp(min=1), 0.0)  # (bins,)
    return torch.where((p_hat > 0) & (p_hat < 1), ratio[bin_of(p_hat)], 0.0)


@register_prompt_weight(
    "gaussian",
    params=("mu", "sigma"),
    formula="exp(-(p_hat - MU)^2 / (2 SIGMA^2))",
    objective="dG/dp = J'(p) exp(-(p - MU)^2 / (2 SIGMA^2)): prompts near pass rate MU count most",
    source="FG-ExPO's Gaussian curriculum (Lin et al. 2026), as a loss weight",
    summary="a Gaussian around pass rate MU, rewards in [0, 1]",
    example=(0.4, 0.2),
)
def gaussian(p_hat: torch.Tensor, *, bins: int, reference: torch.Tensor, mu: float, sigma: float) -> torch.Tensor:
    return torch.exp(-((p_hat - mu) ** 2) / (2 * sigma**2))


def _check_gaussian(mu: float, sigma: float) -> str | None:
    if not (math.isfinite(mu) and 0 <= mu <= 1):
        return f"MU (the pass rate weighted most) must be in [0, 1], got {mu!r}"
    if not (math.isfinite(sigma) and sigma > 0):
        return f"SIGMA must be a finite number > 0, got {sigma!r}"
    if sigma < 0.01:  # narrower, and the N+1 possible rates of a group mostly get a weight that rounds to 0
        return f"SIGMA must be at least 0.01 (the spacing of pass rates is 1/N), got {sigma!r}"
    return None


_CHECKS = {"gaussian": _check_gaussian}


# ------------------------------------------------------------------------------------------ the window (state)


@dataclass
class PromptWindow:
    """CurveRL's sliding window: the success rates in (0, 1) of the last `size` batches (one entry per batch, empty
    ones too). `reference()` is the lagged reference, its rates (None while it holds none: then the current batch is
    the reference, `PromptWeightSpec.weights`); `push(p_hat)` adds the batch after its weights are computed and evicts
    the oldest beyond `size`.
    `state_dict()` / `load_state_dict()` are JSON-ready (checkpoints)."""

    size: int = DEFAULT_WINDOW
    batches: list[list[float]] = field(default_factory=list)
    pushed: int = 0  # batches seen in all

    def reference(self) -> torch.Tensor | None:
        held = [p for batch in self.batches for p in batch]
        return torch.tensor(held, dtype=torch.float64) if held else None

    def push(self, p_hat: torch.Tensor) -> None:
        self.batches.append(inner(p_hat.to(torch.float64).cpu()).tolist())
        self.pushed += 1
        del self.batches[: max(0, len(self.batches) - self.size)]

    def __len__(self) -> int:
        """Rates held (the reference's size while it is not empty)."""
        return sum(map(len, self.batches))

    def state_dict(self) -> dict:
        return {"size": self.size, "batches": [list(b) for b in self.batches], "pushed": self.pushed}

    def load_state_dict(self, state: dict) -> None:
        """Restore a saved window; a malformed one raises `ValueError` (a hand-edited checkpoint), and one saved with
        another size is cut to this run's size (the newest batches kept)."""
        try:
            batches = [[float(p) for p in batch] for batch in state["batches"]]
            pushed = int(state["pushed"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"the saved prompt-weight window is malformed ({err!r}): {state!r:.200}") from None
        if any(not 0 < p < 1 for batch in batches for p in batch) or pushed < len(batches):
            raise ValueError(f"the saved prompt-weight window is malformed (rates must lie in (0, 1)): {state!r:.200}")
        self.batches = batches[max(0, len(batches) - self.size):] if self.size else []
        self.pushed = pushed


# ------------------------------------------------------------------------------------------ derived lists


def prompt_weight_help() -> str:
    """Names and summaries for `OrderGradConfig.ordergrad_prompt_weight`'s help."""
    return _ROWS.help(lambda row: f"{_form(row)} ({row.summary})")


def prompt_weight_table() -> str:
    """The markdown table of docs/estimators.md, one row per registered prompt weight."""
    rows = ["| setting | weight w(p_hat) | state | rewards | what it optimizes | source |", "|---|---|---|---|---|---|"]
    for row in _REGISTRY.values():
        state = f"window of `{WINDOW_FIELD}` batches" if row.stateful else "none"
        rows.append(f"| `{_form(row)}` | {row.formula} | {state} | {row.rewards} | {row.objective} "
                    f"| {row.source or 'this package'} |")  # fmt: skip
    return "\n".join(rows)
