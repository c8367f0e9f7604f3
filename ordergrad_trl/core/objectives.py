"""Objective strings -> rank weights of a finite-sample L-statistic.

An objective over K i.i.d. rewards is J = E[sum_j w_j R_(j:K)], with R_(1:K) <= ... <= R_(K:K).
One weight convention everywhere in this package: **ascending**, w[0] weighs the smallest of the K draws and
w[K-1] the largest. `rank_weights` is the only parser of objective strings; the trainer, the recipes and `eval/`
all go through it, so a YAML file, the paper and the README mean the same thing by "TopM:2".

Presets (case-insensitive; `Name:param`) are the rows of `PRESETS` (a `Registry`'s view, by lower-case name;
aliases such as `CVaR` are looked up here), one table from which `rank_weights`, the
list of valid forms in its errors (`VALID_OBJECTIVES`), `OrderGradConfig`'s help and the preset table of
docs/objectives.md (`preset_table()`) are generated. Or give the K weights themselves: a sequence of numbers, or
a string of comma-separated numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from .registry_base import Registry

__all__ = ["DEFAULT_K", "DEFAULT_OBJECTIVE", "rank_weights", "PRESETS", "Preset", "VALID_OBJECTIVES", "preset_table"]

# The defaults of every consumer (the plan, `OrderGradConfig`, the estimators, verl): an unset objective is the mean
# of the best 2 of K ("Mean" when K is 1), and K is min(DEFAULT_K, N - 1) for groups of N rollouts (`core.plan`).
DEFAULT_OBJECTIVE = "TopM:2"
DEFAULT_K = 4


def _tail_count(q: float, k: int) -> int:
    # round first so that q*k = 3.0000000000000004 counts 3 draws, not 4
    return math.ceil(round(q * k, 9))


def _one_hot(j: int, k: int) -> list[float]:
    return [1.0 if i == j else 0.0 for i in range(k)]


def _span_mean(lo: int, hi: int, k: int) -> list[float]:
    """Equal weights on the ascending ranks lo..hi-1 (0-based)."""
    return [1.0 / (hi - lo) if lo <= i < hi else 0.0 for i in range(k)]


def _median(k: int) -> list[float]:
    return _one_hot(k // 2, k) if k % 2 else _span_mean(k // 2 - 1, k // 2 + 1, k)


def _winsorized(m: int, k: int) -> list[float]:
    w = [1.0 / k if m <= i < k - m else 0.0 for i in range(k)]
    w[m] += m / k
    w[k - 1 - m] += m / k
    return w


def _quantile(q: float, k: int) -> list[float]:
    h = min(max(k * q + 0.5, 1.0), float(k))  # Hazen position, 1-indexed
    lo, frac = math.floor(h), h - math.floor(h)
    w = _one_hot(lo - 1, k)
    if frac > 0:
        w[lo - 1], w[lo] = 1.0 - frac, frac
    return w


def _harrell_davis(q: float, k: int) -> list[float]:
    import mpmath  # a dependency of sympy, hence of torch and math-verify

    a, b = (k + 1) * q, (k + 1) * (1 - q)
    cdf = [mpmath.betainc(a, b, 0, j / k, regularized=True) for j in range(k + 1)]
    return [float(cdf[j + 1] - cdf[j]) for j in range(k)]


def _lmoment(r: int, k: int) -> list[float]:
    # Hosking (1990): l_r = sum_i p*_{r-1,i} b_i, b_i = (1/k) sum_j C(j-1,i)/C(k-1,i) x_(j),
    # p*_{r,i} = (-1)^(r-i) C(r,i) C(r+i,i).
    p = [(-1) ** (r - 1 - i) * math.comb(r - 1, i) * math.comb(r - 1 + i, i) for i in range(r)]
    return [sum(p[i] * math.comb(j - 1, i) / math.comb(k - 1, i) for i in range(r)) / k for j in range(1, k + 1)]


def _maxrl(t: int, k: int) -> list[float]:
    # E[max of m draws] = sum_j C(j-1, m-1) / C(K, m) E[R_(j:K)] (the j-th smallest is the max of the m-subsets
    # holding it and m-1 smaller ones), and C(j-1, m-1) / m = C(j, m) / j, so w_j = (1/j) sum_{m<=T} C(j, m) / C(K, m):
    # products of ratios in [0, 1], no overflow at any K (docs/objectives.md, "MaxRL as an L-statistic")
    weights = []
    for j in range(1, k + 1):
        ratio, total = 1.0, 0.0
        for m in range(1, min(t, j) + 1):
            ratio *= (j - m + 1) / (k - m + 1)
            total += ratio
        weights.append(total / j)
    return weights


@dataclass(frozen=True)
class Preset:
    """One named objective: `weights(p, k)` gives its K ascending rank weights where `valid(p, k)` holds."""

    name: str  # as written in docs and errors, e.g. "TopM"
    param: str | None  # the parameter's letter ("m", "q", "r"), None for a preset without one
    kind: type | None  # int or float: how the parameter is parsed
    meaning: str  # what J is over K draws (the docs' table)
    valid_text: str  # the parameter range (or condition on K) as the docs and errors state it
    valid: Callable[[float, int], bool]
    weights: Callable[[float, int], list[float]]
    example: str  # an instance whose weights at K=4 the docs' table shows
    aliases: tuple[str, ...] = ()

    @property
    def form(self) -> str:
        """`TopM:m`, `Mean`: how the preset is written."""
        return f"{self.name}:{self.param}" if self.param else self.name


_ROWS: Registry[Preset] = Registry("objective preset", holder=lambda p: f"the preset {p.form!r}",
                                   same=lambda taken, row: taken == row)
PRESETS: Mapping[str, Preset] = _ROWS.view  # lower-case name -> Preset, in registration order


def _by_name(presets) -> dict[str, Preset]:
    """Lower-case name or alias -> preset; a name two presets claim raises (the lookup would keep only one)."""
    out: dict[str, Preset] = {}
    for preset in presets:
        for name in (preset.name, *preset.aliases):
            taken = out.setdefault(name.lower(), preset)
            if taken is not preset:
                raise ValueError(f"objective preset name {name!r} is taken by {taken.name!r} and {preset.name!r}")
    return out


def _register(preset: Preset) -> Preset:
    """Add `preset` under its lower-case name; a name or alias (any case) another preset claims raises."""
    key = preset.name.lower()
    _ROWS.check(key, preset)
    _by_name((*(p for name, p in _ROWS.rows.items() if name != key), preset))
    return _ROWS.add(key, preset)


def _find(name: str) -> Preset | None:
    """The preset a lower-case name or alias means, or None."""
    return PRESETS.get(name) or next((p for p in PRESETS.values() if name in map(str.lower, p.aliases)), None)


for _preset in (
    Preset("Mean", None, None, "mean reward (RLOO)", "", lambda p, k: True, lambda p, k: [1.0 / k] * k, "Mean"),
    Preset("ReMax", None, None, "best of K (pass@K for 0/1 rewards)", "", lambda p, k: True,
           lambda p, k: _one_hot(k - 1, k), "ReMax", ("Max",)),
    Preset("ReMin", None, None, "worst of K (pass^K for 0/1 rewards)", "", lambda p, k: True,
           lambda p, k: _one_hot(0, k), "ReMin", ("Min",)),
    Preset("Median", None, None, "median (mean of the two middle ones for even K)", "", lambda p, k: True,
           lambda p, k: _median(k), "Median"),
    Preset("Rank", "r", int, "r-th largest (`Rank:1` = max)", "1 <= r <= K", lambda r, k: 1 <= r <= k,
           lambda r, k: _one_hot(k - r, k), "Rank:2"),
    Preset("TopM", "m", int, "mean of the m largest", "1 <= m <= K", lambda m, k: 1 <= m <= k,
           lambda m, k: _span_mean(k - m, k, k), "TopM:2"),
    Preset("BotM", "m", int, "mean of the m smallest", "1 <= m <= K", lambda m, k: 1 <= m <= k,
           lambda m, k: _span_mean(0, m, k), "BotM:2"),
    Preset("TrimM", "m", int, "mean after dropping the m smallest and the m largest", "0 <= m, 2m < K",
           lambda m, k: 0 <= m and 2 * m < k, lambda m, k: _span_mean(m, k - m, k), "TrimM:1"),
    Preset("WinsorizedM", "m", int, "mean after clamping m values at each end to the next", "0 <= m, 2m < K",
           lambda m, k: 0 <= m and 2 * m < k, _winsorized, "WinsorizedM:1"),
    Preset("UpperTailMean", "q", float, "mean of the top ceil(qK) draws", "0 < q <= 1", lambda q, k: 0 < q <= 1,
           lambda q, k: _span_mean(k - _tail_count(q, k), k, k), "UpperTailMean:0.5"),
    Preset("LowerTailMean", "q", float, "mean of the bottom ceil(qK) draws (CVaR)", "0 < q <= 1",
           lambda q, k: 0 < q <= 1, lambda q, k: _span_mean(0, _tail_count(q, k), k), "CVaR:0.5", ("CVaR",)),
    Preset("Quantile", "q", float, "Hazen quantile (plotting positions (j-1/2)/K)", "0 <= q <= 1",
           lambda q, k: 0 <= q <= 1, _quantile, "Quantile:0.25"),
    Preset("HarrellDavis", "q", float, "Harrell-Davis quantile (Beta((K+1)q, (K+1)(1-q)))", "0 < q < 1",
           lambda q, k: 0 < q < 1, _harrell_davis, "HarrellDavis:0.5"),
    Preset("GMD", None, None, "Gini mean difference E\\|X-X'\\| (spread)", "K >= 2", lambda p, k: k >= 2,
           lambda p, k: [2.0 * (2 * j - k - 1) / (k * (k - 1)) for j in range(1, k + 1)], "GMD"),
    Preset("LMoment", "r", int, "Hosking's r-th sample L-moment (r=2 is GMD/2)", "1 <= r <= K",
           lambda r, k: 1 <= r <= k, _lmoment, "LMoment:3"),
    Preset("MaxRL", "T", int, "sum_{k<=T} (best of k) / k: MaxRL's objective (pass@k for 0/1 rewards)",
           "1 <= T <= K", lambda t, k: 1 <= t <= k, _maxrl, "MaxRL:4"),
):  # fmt: skip
    _register(_preset)


def _written(p: Preset) -> str:  # "LowerTailMean:q (CVaR:q)"
    aliases = ", ".join(f"{a}:{p.param}" if p.param else a for a in p.aliases)
    return f"{p.form} ({aliases})" if aliases else p.form


VALID_OBJECTIVES = (
    ", ".join(map(_written, PRESETS.values()))
    + ", or K comma-separated weights (ascending: the first weighs the smallest reward)"
)


def preset_table() -> str:
    """The markdown table of docs/objectives.md: one row per preset, with its weights at K=4 computed here."""
    rows = ["| preset | J over K draws | parameter range | weights at K=4 |", "|---|---|---|---|"]
    for p in PRESETS.values():
        names = " / ".join(f"`{n}:{p.param}`" if p.param else f"`{n}`" for n in (p.name, *p.aliases))
        weights = ", ".join(f"{w:.3g}" for w in rank_weights(p.example, 4).tolist())
        shown = f"`{p.example}`: {weights}" if p.param else weights
        rows.append(f"| {names} | {p.meaning} | {p.valid_text} | {shown} |")
    rows.append('| `"0,0,0.5,0.5"` | any K numbers (a string of comma-separated numbers, a sequence or a 1-D tensor) '
                "| | |")
    return "\n".join(rows)


def _fail(objective, k: int, why: str) -> ValueError:
    return ValueError(f"Invalid objective {objective!r} for k={k}: {why}. Valid forms: {VALID_OBJECTIVES}.")


def _preset_weights(name: str, param: str | None, objective, k: int) -> list[float]:
    preset = _find(name)
    if preset is None:
        raise _fail(objective, k, f"unknown preset {name!r}")
    if preset.kind is None:
        if param is not None:
            raise _fail(objective, k, f"{preset.name!r} takes no parameter")
        value = None
    else:
        if param is None:
            raise _fail(objective, k, "missing parameter after ':'")
        try:
            value = preset.kind(param)
        except ValueError:
            noun = "an integer" if preset.kind is int else "a number"
            raise _fail(objective, k, f"parameter {param!r} is not {noun}") from None
        if not math.isfinite(value):
            raise _fail(objective, k, "parameter must be finite")
    if not preset.valid(value, k):
        raise _fail(objective, k, f"{preset.form} needs {preset.valid_text.replace('K', 'k')}")
    return preset.weights(value, k)


def rank_weights(objective: str | Sequence[float] | torch.Tensor, k: int) -> torch.Tensor:
    """Rank weights `w` (shape `(k,)`, float64, ascending convention) of an objective on `k` draws.

    Args:
        objective: a preset such as `"TopM:2"`, `"CVaR:0.25"` (see the module docstring), `k` comma-separated
            numbers, or a sequence / 1-D tensor of `k` numbers.
        k: number of i.i.d. draws the objective is defined on (`k >= 1`).

    Raises:
        ValueError: unknown preset, bad parameter, wrong number of weights or non-finite weights; the message
            lists the valid forms.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if isinstance(objective, str):  # parsed where a stage is built (`ObjectiveStage`); the stage carries the weights
        values = _parse(objective, k)
    else:
        values = _checked([float(v) for v in (objective.tolist() if isinstance(objective, torch.Tensor) else objective)],
                          objective, k)  # fmt: skip
    return torch.tensor(values, dtype=torch.float64)


def _parse(objective: str, k: int) -> tuple[float, ...]:
    text = objective.strip()
    if "," in text or _is_number(text):
        try:
            values = [float(t) for t in text.split(",")]
        except ValueError:
            raise _fail(objective, k, "not a list of numbers") from None
    else:
        name, _, param = text.partition(":")
        values = _preset_weights(name.strip().lower(), param.strip() if ":" in text else None, objective, k)
    return _checked(values, objective, k)


def _checked(values: list[float], objective, k: int) -> tuple[float, ...]:
    if len(values) != k:
        raise _fail(objective, k, f"got {len(values)} weights, need exactly k={k}")
    if not all(math.isfinite(v) for v in values):
        raise _fail(objective, k, "weights must be finite")
    return tuple(values)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
