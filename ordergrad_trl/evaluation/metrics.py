"""Evaluation metrics on a `(P, n)` tensor: P problems, n samples each, NaN = missing or unscorable sample.

Every order-statistic metric is the unbiased U-statistic of the training code, `ordergrad_trl.lstat_value`:
for each problem it is the exact average, over all K-subsets of its n samples, of sum_j w_j (subset sorted
ascending)_j, with `w = rank_weights(objective, K)`. So a number reported here and the objective a run was
trained on are the same function of the same rewards. With 0/1 correctness and c correct out of n:

    pass@k   = ReMax  weights = 1 - C(n-c, k) / C(n, k)    (Chen et al. 2021, the Codex estimator)
    pass^k   = ReMin  weights = C(c, k) / C(n, k)            (all k of k correct)
    best@k   = ReMax  on any reward (shaped or not), worst@k = ReMin, CVaR_q@k = LowerTailMean:q, mean = pass@1

NaN samples are dropped per problem (n becomes the number of valid samples); a problem with fewer than K valid
samples gives NaN and is left out of the benchmark mean.

maj@k is not an L-statistic (the vote depends on the answers, not only on the rewards); see `maj_at_k`.

`METRICS` is the one table of the reported metrics (report.json key, report.md label, how each is computed, per k
or not, where it shows); `report`, `render`, the plot and the docs' metric table iterate it. A new metric is one
`@register_metric` definition at the end of this file (plus its test against brute force).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch

from ordergrad_trl import lstat_value, rank_weights
from ordergrad_trl.core.registry_base import Registry
from ordergrad_trl.core.stats import bootstrap_ci  # re-exported: the CI of every eval report

from .metric_inputs import INPUTS

__all__ = [
    "METRICS",
    "Metric",
    "best_of_k",
    "bootstrap_ci",
    "cvar_at_k",
    "lstat_metric",
    "maj_at_k",
    "maj_from_counts",
    "metric_table_markdown",
    "pass_at_k",
    "pass_hat_k",
    "problem_mean",
    "register_metric",
    "worst_of_k",
]


def _check(rewards: torch.Tensor, k: int, name: str = "rewards") -> torch.Tensor:
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    if rewards.dim() != 2:
        raise ValueError(f"{name} must have shape (problems, samples), got {tuple(rewards.shape)}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= rewards.shape[1]:
        raise ValueError(f"k must be an integer in [1, samples={rewards.shape[1]}], got {k!r}")
    return rewards


def lstat_metric(rewards: torch.Tensor, objective, k: int) -> torch.Tensor:
    """Per-problem unbiased estimate `(P,)` of E[sum_j w_j R_(j:k)] for `w = rank_weights(objective, k)`."""
    rewards = _check(rewards, k)
    weights = rank_weights(objective, k)
    valid = ~torch.isnan(rewards)  # (P, n)
    counts = valid.sum(-1)  # (P,)
    if bool((counts == rewards.shape[1]).all()):
        return lstat_value(rewards, weights)
    # Rows with missing samples, grouped by their number v of valid ones: each group is a dense (R, v) tensor,
    # so only the weight tables of the v values present are built (lstat_value's NaN path builds one for every
    # v <= n, O(n^2 K) at n = 256).
    out = torch.full((rewards.shape[0],), math.nan, dtype=torch.float64)
    for v in counts.unique().tolist():
        if v >= k:
            rows = (counts == v).nonzero().flatten()
            out[rows] = lstat_value(rewards[rows][valid[rows]].view(len(rows), v), weights)
    return out


def pass_at_k(correct: torch.Tensor, k: int) -> torch.Tensor:
    """`(P,)` probability that at least one of k samples is correct (0/1 `correct`, NaN = missing)."""
    return lstat_metric(correct, "ReMax", k)


def pass_hat_k(correct: torch.Tensor, k: int) -> torch.Tensor:
    """`(P,)` pass^k: probability that all k samples are correct."""
    return lstat_metric(correct, "ReMin", k)


def best_of_k(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """`(P,)` E[max of k rewards]; equals `pass_at_k` for 0/1 rewards."""
    return lstat_metric(rewards, "ReMax", k)


def worst_of_k(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """`(P,)` E[min of k rewards]; equals `pass_hat_k` for 0/1 rewards."""
    return lstat_metric(rewards, "ReMin", k)


def cvar_at_k(rewards: torch.Tensor, k: int, q: float) -> torch.Tensor:
    """`(P,)` E[mean of the ceil(q k) smallest of k rewards] (`LowerTailMean:q`, as the training objective)."""
    return lstat_metric(rewards, f"LowerTailMean:{q}", k)


def problem_mean(values: torch.Tensor) -> tuple[float, int]:
    """(mean over problems ignoring NaN, number of problems counted); (nan, 0) when none counts."""
    values = torch.as_tensor(values, dtype=torch.float64)
    ok = ~torch.isnan(values)
    count = int(ok.sum())
    return (float(values[ok].mean()) if count else math.nan), count


# --------------------------------------------------------------------------------------------------- maj@k
def maj_at_k(labels: torch.Tensor, correct: torch.Tensor, k: int) -> torch.Tensor:
    """`(P,)` expected correctness of a majority vote over k samples drawn without replacement from the n.

    Definition: draw a uniform k-subset of a problem's valid samples; every sample with an answer votes for its
    answer class (`labels`, an integer id per distinct answer of that problem; -1 = no answer extracted, which
    does not vote); the vote is the most frequent class, ties broken uniformly at random; the score is the
    correctness of that class (the mean `correct` of its members, which agree when classes are answer
    equivalence classes), 0 when nobody votes. `maj_at_k` is the exact expectation of that score over all
    C(n, k) subsets, computed without enumerating them (`maj_from_counts`). With k = n this is the usual
    majority vote over all samples; maj@1 = pass@1 when every correct sample has an answer.

    Args:
        labels: `(P, n)` integer answer-class ids, -1 for no answer.
        correct: `(P, n)` 0/1 correctness; NaN marks a missing sample (left out, like `lstat_value`).
        k: votes per draw, 1 <= k <= n. Problems with fewer than k valid samples give NaN.
    """
    correct = _check(correct, k, "correct")
    labels = torch.as_tensor(labels)
    if labels.shape != correct.shape or labels.is_floating_point():
        raise ValueError(f"labels must be an integer tensor of shape {tuple(correct.shape)}, got "
                         f"{labels.dtype} {tuple(labels.shape)}")
    lab, cor = labels.numpy().astype(np.int64), correct.numpy()
    out = np.full(cor.shape[0], np.nan)
    for p in range(cor.shape[0]):
        valid = ~np.isnan(cor[p])
        if valid.sum() < k:
            continue
        votes = valid & (lab[p] >= 0)
        _, cls = np.unique(lab[p][votes], return_inverse=True)
        sizes = np.bincount(cls)  # (C,) members per answer class
        ok = np.bincount(cls, weights=cor[p][votes]) / np.maximum(sizes, 1)  # (C,) mean correctness
        out[p] = maj_from_counts(sizes.tolist(), ok.tolist(), int((valid & (lab[p] < 0)).sum()), k)
    return torch.from_numpy(out)


def maj_from_counts(sizes, ok, abstain: int, k: int, exact: bool = False):
    """Expected majority-vote score of a uniform k-subset of a pool of answer classes, in polynomial time.

    The pool holds `sizes[c]` samples of class c (score `ok[c]`) and `abstain` samples that do not vote.
    Condition on the class c that wins with j votes: the other classes must each get <= j votes, and a subset
    where t of them also get j is a (t+1)-way tie worth ok[c] / (t+1). Counting those subsets is a product of
    generating functions in x (samples drawn) and y (classes tied at j), one per other class,
    f_d(x, y) = sum_{i<j} C(m_d, i) x^i + y C(m_d, j) x^j; classes smaller than j cannot tie and merge with the
    abstainers into one binomial (1 + x)^small. So

        maj@k = sum_c ok[c] sum_j C(m_c, j) sum_t [x^(k-j) y^t] (1 + x)^small prod_{d != c, m_d >= j} f_d / (t + 1)
                / C(n, k).

    Work: O(n log n) polynomial products of size (k + 1) x (classes + 1) per class with ok > 0 (at most n / j
    classes reach j). Every term is a non-negative count below C(n, n // 2), so float64 is accurate to ~1e-13
    relative for n <= 1000; beyond that (or with `exact=True`) the same recursion runs on Python integers and
    returns a `Fraction` (`ok` must then be rationals).
    """
    sizes = [int(m) for m in sizes]
    if len(ok) != len(sizes) or min(sizes, default=1) < 1 or abstain < 0:
        raise ValueError(f"need one ok per class, sizes >= 1 and abstain >= 0, got {sizes}, {list(ok)}, {abstain}")
    n = sum(sizes) + abstain
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, pool size {n}], got {k}")
    exact = exact or math.comb(n, n // 2) > 1e300
    comb = _binom_table(n, exact)  # (n + 1, n + 1): comb[m, i] = C(m, i), 0 for i > m
    zero = 0 if exact else 0.0
    drift = np.subtract.outer(np.arange(k + 1), np.arange(k + 1))  # (k + 1, k + 1): r - s, Toeplitz index
    total = zero
    for c, (m_c, ok_c) in enumerate(zip(sizes, ok)):
        if ok_c == 0:
            continue
        others = np.array(sizes[:c] + sizes[c + 1 :], dtype=np.int64)
        top = int(others.max(initial=0))
        inner = zero
        # 1. j > every other class: no rival, no tie; all the others are one binomial (1 + x)^(n - m_c)
        js = np.arange(top + 1, min(m_c, k) + 1)
        js = js[k - js <= n - m_c]
        if len(js):
            inner += np.dot(comb[m_c, js], comb[n - m_c, k - js])
        # 2. j <= the largest rival: the generating-function product over the classes that can reach j
        for j in range(1, min(m_c, k, top) + 1):
            rest = k - j  # samples drawn from the other classes and the abstainers
            big = np.sort(others[others >= j])
            small = abstain + int(others[others < j].sum())
            if rest > small + j * len(big):  # the others cannot absorb k - j draws with <= j votes each
                continue
            poly = np.zeros((rest + 1, len(big) + 1), dtype=comb.dtype)  # (x degree, classes tied at j)
            poly[:, 0] = comb[small, : rest + 1]
            low, low_m = None, -1
            for t, m in enumerate(big.tolist()):
                # f_d: i < j votes (a lower-triangular Toeplitz of C(m, i), shared by equal-size classes), or
                # exactly j votes, one more tie (column t -> t + 1)
                cur = poly[:, : t + 1].copy()
                if j <= 4:  # a few shifted adds beat building the Toeplitz matrix
                    new = cur.copy()  # i = 0
                    for i in range(1, min(j, rest + 1)):
                        new[i:] += comb[m, i] * cur[: rest + 1 - i]
                else:
                    if m != low_m:
                        d = drift[: rest + 1, : rest + 1]
                        low, low_m = np.where((d >= 0) & (d < j), comb[m][d.clip(0)], zero), m
                    new = low @ cur
                poly[:, : t + 1] = new
                if j <= rest:
                    poly[j:, 1 : t + 2] += comb[m, j] * cur[: rest + 1 - j]
            ties = poly[rest]  # (T + 1,)
            inner += comb[m_c, j] * sum(ties[t] / (t + 1) if not exact else Fraction(ties[t], t + 1)
                                        for t in range(len(ties)))
        total += ok_c * inner if not exact else Fraction(ok_c) * inner
    return total / comb[n, k] if not exact else Fraction(total) / comb[n, k]


@functools.lru_cache(maxsize=8)
def _binom_table(n: int, exact: bool) -> np.ndarray:
    """`(n + 1, n + 1)` Pascal triangle, exact integers rounded once to float64 (or kept as Python ints)."""
    table = np.zeros((n + 1, n + 1), dtype=object)
    row = [1]
    for m in range(n + 1):
        table[m, : m + 1] = row
        row = [1] + [a + b for a, b in zip(row, row[1:])] + [1]
    table = table if exact else table.astype(np.float64)
    table.flags.writeable = False
    return table


# ------------------------------------------------------------------------------------------- the metric table
PLACES = ("table", "breakdown", "plot")  # report.md's table over k (or of single values), per-group tables, passk.png
# How a value is shown: "probability" always in %; "reward" in % only when every reward is 0 or 1 (a rate then);
# "raw" as computed (a length, a count).
UNITS = ("probability", "reward", "raw")


@dataclass(frozen=True)
class Metric:
    """One reported metric. `key` and `label` are templates: `{k}` and every name in `params` (a report setting
    such as `cvar_q`, written with `:g`) are filled in, e.g. "cvar{cvar_q}@{k}" -> "cvar0.25@4"."""

    name: str
    key: str  # report.json key under "metrics"
    label: str  # report.md row label
    on: str  # what it scores, one of INPUTS: "correct" (0/1 correctness) or "reward" (the --reward_weights one)
    unit: str  # how it is shown, one of UNITS
    compute: Callable[[Mapping[str, torch.Tensor], int | None, Mapping], torch.Tensor]  # (inputs, k, config) -> (P,)
    definition: str  # the docs' "definition" column
    as_lstat: str  # the docs' "as an L-statistic" column
    per_k: bool = True  # one value per k of --ks, else one value (k = None)
    shows: frozenset[str] = frozenset({"table"})  # a subset of PLACES
    params: tuple[str, ...] = ()
    same_as_on_binary: str | None = None  # the metric it equals on a 0/1 reward: not shown then (best@k = pass@k)
    breakdown_ks: tuple[str, ...] = ("last",)  # "first" / "last" of --ks, where "breakdown" in shows
    plot_style: tuple[str, str] = ("-", "o")  # line style and marker, where "plot" in shows

    def _fill(self, template: str, k: int | None, config: Mapping) -> str:
        return template.format(k=k, **{p: f"{config[p]:g}" for p in self.params})

    def key_at(self, k: int | None, config: Mapping) -> str:
        return self._fill(self.key, k, config)

    def label_at(self, config: Mapping) -> str:
        return self._fill(self.label, None, config)

    def percent(self, binary_reward: bool) -> bool:
        return self.unit == "probability" or (self.unit == "reward" and binary_reward)

    def visible(self, binary_reward: bool) -> bool:
        return not (binary_reward and self.same_as_on_binary)


_ROWS: Registry[Metric] = Registry("metric", holder=lambda m: f"{m.compute.__module__}.{m.compute.__qualname__}")
_METRICS = _ROWS.rows
METRICS: Mapping[str, Metric] = _ROWS.view
"""Every reported metric by name, in display order."""


def register_metric(name: str, **fields) -> Callable:
    """Decorator: `fn(inputs, k, config) -> (P,)` becomes the metric `name` (fields: those of `Metric`). `inputs`
    holds the `(P, n)` tensor its `on` names, `correct` or `reward` (NaN = missing), and `labels` (answer classes,
    -1 = no answer): reading the other is an error (`metric_inputs.compute_metric`); `config` is the report's
    settings (`ReportArgs` as a dict)."""
    unknown = set(fields.get("shows", ())) - set(PLACES)
    if unknown:
        raise ValueError(f"metric {name!r}: unknown places {sorted(unknown)}; valid: {', '.join(PLACES)}")
    for what, valid in (("on", INPUTS), ("unit", UNITS)):
        if fields.get(what) not in valid:
            raise ValueError(f"metric {name!r}: {what} must be one of {', '.join(valid)}, got {fields.get(what)!r}")

    def add(fn: Callable) -> Callable:
        metric = Metric(name=name, compute=fn, **{**fields, "shows": frozenset(fields.get("shows", ("table",)))})
        same_key = [m.name for m in _METRICS.values() if m.key == metric.key]
        if same_key:  # report.json keys are per metric, whatever the names
            raise ValueError(f"metric {name!r}: key {metric.key!r} is already registered by metric {same_key[0]!r}")
        _ROWS.add(name, metric)
        return fn

    return add


def metric_table_markdown() -> str:
    """The metric table of docs/evaluation.md, one row per `METRICS` entry, then the `--objectives` row."""
    rows = ["| metric | definition (per problem, then averaged over problems) | as an L-statistic |", "|---|---|---|"]
    for m in METRICS.values():
        key = m.key.format(k="k", **{p: f"<{p.split('_')[-1]}>" for p in m.params})
        rows.append(f"| `{key}` | {m.definition} | {m.as_lstat} |")
    rows.append("| `Preset@K` | each `--objectives` entry (report.json: `objectives`), e.g. the objective a run was "
                "trained on | `rank_weights(Preset, K)` |")
    return "\n".join(rows)


@register_metric("pass", key="pass@{k}", label="pass@k", on="correct", unit="probability", shows=PLACES,
                 breakdown_ks=("first", "last"),
                 definition="P(at least one of k samples correct) = 1 - C(n-c,k)/C(n,k) (the Codex estimator)",
                 as_lstat="`ReMax` on correctness")
def _pass(inputs, k, config):
    return pass_at_k(inputs["correct"], k)


@register_metric("pass_hat", key="pass^{k}", label="pass^k", on="correct", unit="probability", shows=PLACES,
                 plot_style=("--", "s"),
                 definition="P(all k correct) = C(c,k)/C(n,k)", as_lstat="`ReMin` on correctness")
def _pass_hat(inputs, k, config):
    return pass_hat_k(inputs["correct"], k)


@register_metric("maj", key="maj@{k}", label="maj@k", on="correct", unit="probability", shows=("table", "breakdown"),
                 definition="expected correctness of a majority vote over k samples (below)",
                 as_lstat="not an L-statistic")
def _maj(inputs, k, config):
    return maj_at_k(inputs["labels"], inputs["correct"], k)


@register_metric("best", key="best@{k}", label="best@k (reward)", on="reward", unit="reward",
                 same_as_on_binary="pass@k",
                 definition="E[max of k rewards] (= pass@k for 0/1 rewards)", as_lstat="`ReMax` on the reward")
def _best(inputs, k, config):
    return best_of_k(inputs["reward"], k)


@register_metric("worst", key="worst@{k}", label="worst@k (reward)", on="reward", unit="reward",
                 same_as_on_binary="pass^k",
                 definition="E[min of k rewards] (= pass^k for 0/1 rewards)", as_lstat="`ReMin` on the reward")
def _worst(inputs, k, config):
    return worst_of_k(inputs["reward"], k)


@register_metric("cvar", key="cvar{cvar_q}@{k}", label="CVaR{cvar_q}@k (reward)", on="reward", unit="reward",
                 params=("cvar_q",),
                 definition="E[mean of the ceil(qk) worst of k rewards] (`--cvar_q`, default 0.25)",
                 as_lstat="`LowerTailMean:q`")
def _cvar(inputs, k, config):
    return cvar_at_k(inputs["reward"], k, config["cvar_q"])


@register_metric("mean_reward", key="mean_reward", label="mean reward", on="reward", unit="reward", per_k=False,
                 definition="mean reward (= pass@1 for correctness)", as_lstat="`Mean`", same_as_on_binary="pass@1")
def _mean_reward(inputs, k, config):
    return lstat_metric(inputs["reward"], "Mean", 1)
