"""Objective strings -> rank weights of a finite-sample L-statistic.

An objective over K i.i.d. rewards is J = E[sum_j w_j R_(j:K)], with R_(1:K) <= ... <= R_(K:K).
One weight convention everywhere in this package: **ascending**, w[0] weighs the smallest of the K draws and
w[K-1] the largest. `rank_weights` is the only parser of objective strings; the trainer, the recipes and `eval/`
all go through it, so a YAML file, the paper and the README mean the same thing by "TopM:2".

Presets (case-insensitive; `Name:param`):

| preset                         | meaning (on K draws)                                  | parameter range      |
|--------------------------------|-------------------------------------------------------|----------------------|
| `Mean`                         | mean (K=1 or Mean gives RLOO)                         |                      |
| `ReMax` / `Max`                | best of K (binary rewards: pass@K)                    |                      |
| `ReMin` / `Min`                | worst of K (binary rewards: pass^K)                   |                      |
| `Median`                       | median (mean of the two middle ones for even K)       |                      |
| `Rank:r`                       | the r-th largest (r=1 is the max)                     | 1 <= r <= K          |
| `TopM:m`                       | mean of the m largest                                 | 1 <= m <= K          |
| `BotM:m`                       | mean of the m smallest                                | 1 <= m <= K          |
| `TrimM:m`                      | mean after dropping the m smallest and the m largest  | 0 <= m, 2m < K       |
| `WinsorizedM:m`                | mean after clamping m values at each end to the next  | 0 <= m, 2m < K       |
| `UpperTailMean:q`              | mean of the top ceil(qK) draws                        | 0 < q <= 1           |
| `LowerTailMean:q` / `CVaR:q`   | mean of the bottom ceil(qK) draws                     | 0 < q <= 1           |
| `Quantile:q`                   | Hazen quantile: plotting positions (j - 1/2)/K        | 0 <= q <= 1          |
| `HarrellDavis:q`               | Harrell-Davis quantile (Beta((K+1)q, (K+1)(1-q)))     | 0 < q < 1            |
| `GMD`                          | Gini mean difference E|X - X'|                        | K >= 2               |
| `LMoment:r`                    | Hosking's r-th sample L-moment (r=2 is GMD/2)         | 1 <= r <= K          |

Or give the K weights themselves: a sequence of numbers, or a string of comma-separated numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["rank_weights", "VALID_OBJECTIVES"]

VALID_OBJECTIVES = (
    "Mean, ReMax (Max), ReMin (Min), Median, Rank:r, TopM:m, BotM:m, TrimM:m, WinsorizedM:m, UpperTailMean:q, "
    "LowerTailMean:q (CVaR:q), Quantile:q, HarrellDavis:q, GMD, LMoment:r, or K comma-separated weights "
    "(ascending: the first weighs the smallest reward)"
)

_ALIASES = {"max": "remax", "min": "remin", "cvar": "lowertailmean"}
_INT_PARAM = {"rank", "topm", "botm", "trimm", "winsorizedm", "lmoment"}
_FLOAT_PARAM = {"uppertailmean", "lowertailmean", "quantile", "harrelldavis"}
_NO_PARAM = {"mean", "remax", "remin", "median", "gmd"}


def _fail(objective, k: int, why: str) -> ValueError:
    return ValueError(f"Invalid objective {objective!r} for k={k}: {why}. Valid forms: {VALID_OBJECTIVES}.")


def _tail_count(q: float, k: int) -> int:
    # round first so that q*k = 3.0000000000000004 counts 3 draws, not 4
    return math.ceil(round(q * k, 9))


def _lmoment_weights(r: int, k: int) -> list[float]:
    # Hosking (1990): l_r = sum_i p*_{r-1,i} b_i, b_i = (1/k) sum_j C(j-1,i)/C(k-1,i) x_(j),
    # p*_{r,i} = (-1)^(r-i) C(r,i) C(r+i,i).
    p = [(-1) ** (r - 1 - i) * math.comb(r - 1, i) * math.comb(r - 1 + i, i) for i in range(r)]
    return [sum(p[i] * math.comb(j - 1, i) / math.comb(k - 1, i) for i in range(r)) / k for j in range(1, k + 1)]


def _harrell_davis_weights(q: float, k: int) -> list[float]:
    import mpmath  # a dependency of sympy, hence of torch and math-verify

    a, b = (k + 1) * q, (k + 1) * (1 - q)
    cdf = [mpmath.betainc(a, b, 0, j / k, regularized=True) for j in range(k + 1)]
    return [float(cdf[j + 1] - cdf[j]) for j in range(k)]


def _preset(name: str, param: str | None, objective, k: int) -> list[float]:
    name = _ALIASES.get(name, name)
    if name in _NO_PARAM and param is not None:
        raise _fail(objective, k, f"{name!r} takes no parameter")
    if name in _INT_PARAM | _FLOAT_PARAM and param is None:
        raise _fail(objective, k, "missing parameter after ':'")
    if name in _INT_PARAM:
        try:
            p = int(param)
        except ValueError:
            raise _fail(objective, k, f"parameter {param!r} is not an integer") from None
    elif name in _FLOAT_PARAM:
        try:
            p = float(param)
        except ValueError:
            raise _fail(objective, k, f"parameter {param!r} is not a number") from None
        if not math.isfinite(p):
            raise _fail(objective, k, "parameter must be finite")

    w = [0.0] * k
    if name == "mean":
        return [1.0 / k] * k
    if name == "remax":
        w[-1] = 1.0
    elif name == "remin":
        w[0] = 1.0
    elif name == "median":
        if k % 2:
            w[k // 2] = 1.0
        else:
            w[k // 2 - 1] = w[k // 2] = 0.5
    elif name == "rank":
        if not 1 <= p <= k:
            raise _fail(objective, k, "Rank:r needs 1 <= r <= k")
        w[k - p] = 1.0
    elif name in ("topm", "botm"):
        if not 1 <= p <= k:
            raise _fail(objective, k, f"{name}:m needs 1 <= m <= k")
        span = range(k - p, k) if name == "topm" else range(p)
        for j in span:
            w[j] = 1.0 / p
    elif name == "trimm":
        if not (p >= 0 and 2 * p < k):
            raise _fail(objective, k, "TrimM:m needs 0 <= m and 2m < k")
        for j in range(p, k - p):
            w[j] = 1.0 / (k - 2 * p)
    elif name == "winsorizedm":
        if not (p >= 0 and 2 * p < k):
            raise _fail(objective, k, "WinsorizedM:m needs 0 <= m and 2m < k")
        for j in range(p, k - p):
            w[j] = 1.0 / k
        w[p] += p / k
        w[k - 1 - p] += p / k
    elif name in ("uppertailmean", "lowertailmean"):
        if not 0 < p <= 1:
            raise _fail(objective, k, f"{name}:q needs 0 < q <= 1")
        m = _tail_count(p, k)
        span = range(k - m, k) if name == "uppertailmean" else range(m)
        for j in span:
            w[j] = 1.0 / m
    elif name == "quantile":
        if not 0 <= p <= 1:
            raise _fail(objective, k, "Quantile:q needs 0 <= q <= 1")
        h = min(max(k * p + 0.5, 1.0), float(k))  # Hazen position, 1-indexed
        lo = math.floor(h)
        frac = h - lo
        w[lo - 1] = 1.0 - frac
        if frac > 0:
            w[lo] = frac
    elif name == "harrelldavis":
        if not 0 < p < 1:
            raise _fail(objective, k, "HarrellDavis:q needs 0 < q < 1")
        return _harrell_davis_weights(p, k)
    elif name == "gmd":
        if k < 2:
            raise _fail(objective, k, "GMD needs k >= 2")
        return [2.0 * (2 * j - k - 1) / (k * (k - 1)) for j in range(1, k + 1)]
    elif name == "lmoment":
        if not 1 <= p <= k:
            raise _fail(objective, k, "LMoment:r needs 1 <= r <= k")
        return _lmoment_weights(p, k)
    else:
        raise _fail(objective, k, f"unknown preset {name!r}")
    return w


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
    if isinstance(objective, str):
        text = objective.strip()
        if "," in text or _is_number(text):
            try:
                values = [float(t) for t in text.split(",")]
            except ValueError:
                raise _fail(objective, k, "not a list of numbers") from None
        else:
            name, _, param = text.partition(":")
            values = _preset(name.strip().lower(), param.strip() if ":" in text else None, objective, k)
    else:
        values = [float(v) for v in (objective.tolist() if isinstance(objective, torch.Tensor) else objective)]
    if len(values) != k:
        raise _fail(objective, k, f"got {len(values)} weights, need exactly k={k}")
    if not all(math.isfinite(v) for v in values):
        raise _fail(objective, k, "weights must be finite")
    return torch.tensor(values, dtype=torch.float64)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
