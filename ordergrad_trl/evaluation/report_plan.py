"""The report's flags parsed once into a frozen, typed `ReportPlan` (`plan_report`) that every later stage reads.

`--reward_weights` becomes `(field, weight)` terms over the score fields `layout.REWARD_FIELDS`, each `--objectives`
entry an `ObjectiveSpec` whose rank weights were built once to check it; `run`, `report` and the command line pass
the plan on, never the text. Every error is one line naming the flag and its valid values.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .args import BOUNDS, MAX_REWARD_WEIGHT, ReportArgs, check_types
from .errors import UsageError
from .layout import REWARD_FIELDS

__all__ = ["ObjectiveSpec", "ReportPlan", "RewardWeights", "as_plan", "plan_report"]


@dataclass(frozen=True)
class RewardWeights:
    """`--reward_weights`: a sample's reward is the sum over `terms`, in order, of weight x its score field."""

    text: str  # as given: report.json's config and report.md's header quote it
    terms: tuple[tuple[str, float], ...]

    @property
    def binary(self) -> bool:
        """The reward is plain 0/1 correctness: shown as a rate, and best@k / worst@k are pass@k / pass^k."""
        return self.terms == (("correct", 1.0),)


@dataclass(frozen=True)
class ObjectiveSpec:
    """One `--objectives` entry: `rank_weights(objective, k)` on the reward."""

    text: str  # as written, e.g. '0.1,0,0.3,0.6' (K = its number of weights)
    objective: str
    k: int

    @property
    def key(self) -> str:
        """Its report.json / report.md key, `objective@K`."""
        return f"{self.objective}@{self.k}"


@dataclass(frozen=True)
class ReportPlan:
    """Every report setting, parsed and checked (`plan_report`)."""

    ks: tuple[int, ...] | None  # as given (None: powers of two up to n)
    reward: RewardWeights
    cvar_q: float
    objectives: tuple[ObjectiveSpec, ...]
    bootstrap_samples: int
    bootstrap_seed: int
    ci_level: float
    breakdown: tuple[str, ...]
    plot: bool

    def args(self) -> ReportArgs:
        """The flags this plan was parsed from, as `ReportArgs`."""
        return ReportArgs(ks=None if self.ks is None else list(self.ks), reward_weights=self.reward.text,
                          cvar_q=self.cvar_q, objectives=[o.text for o in self.objectives],
                          bootstrap_samples=self.bootstrap_samples, bootstrap_seed=self.bootstrap_seed,
                          ci_level=self.ci_level, breakdown=list(self.breakdown), plot=self.plot)

    @property
    def config(self) -> dict:
        """The settings as flags (report.json `config`; the metrics' key parameters such as `cvar_q`)."""
        return asdict(self.args())


def parse_reward_weights(text: str, where: str = "") -> RewardWeights:
    flag, valid = f"{where}--reward_weights", ", ".join(REWARD_FIELDS)
    terms: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in REWARD_FIELDS:
            raise UsageError(f"{flag} must look like 'correct=1,format=0.2' (fields: {valid}), got {text!r}")
        if name in terms:
            raise UsageError(f"{flag} gives {name} twice (in {text!r})")
        try:
            weight = float(value)
        except ValueError:
            raise UsageError(f"{flag}: {value!r} is not a number (in {text!r})") from None
        if not math.isfinite(weight):
            raise UsageError(f"{flag}: the weight of {name} must be a finite number, got {value.strip()!r}")
        if weight != 0 and not 1 / MAX_REWARD_WEIGHT <= abs(weight) <= MAX_REWARD_WEIGHT:
            # bounded so that no weighted sum of rewards overflows or underflows to 0
            raise UsageError(f"{flag}: the weight of {name} must be 0 or of magnitude in "
                             f"[{1 / MAX_REWARD_WEIGHT:g}, {MAX_REWARD_WEIGHT:g}], got {weight!r} (in {text!r})")
        terms[name] = weight
    if all(w == 0 for w in terms.values()):
        raise UsageError(f"{flag}: every weight is 0, so every reward would be 0 (in {text!r})")
    return RewardWeights(text, tuple(terms.items()))


def parse_objective(spec: str, where: str = "") -> ObjectiveSpec:
    """'TopM:2@4' -> ObjectiveSpec('TopM:2@4', 'TopM:2', 4) with the library's one `OBJECTIVE@K` parser;
    comma-separated weights may omit '@K' (K = their number). K is bounded like --ks before `rank_weights`, whose
    error lists the valid presets, builds its weights."""
    from ordergrad_trl import rank_weights
    from ordergrad_trl.core.schedule import parse_objective_at_k

    flag = f"{where}--objectives"
    default_k = len(spec.split(",")) if "@" not in spec and "," in spec else None
    try:
        objective, k = parse_objective_at_k(spec, default_k=default_k, field_name="--objectives")
    except ValueError as err:  # names the flag and the form
        raise UsageError(f"{where}{err}") from None
    low, high = BOUNDS["ks"]
    if not low <= k <= high:  # its weights are K long: refused before they are built
        raise UsageError(f"{flag} {spec!r}: K must be in [{low:g}, {high:g}], got {k}")
    try:
        rank_weights(objective, k)
    except ValueError as err:  # names the valid presets
        raise UsageError(f"{flag} {spec!r}: {err}") from None
    return ObjectiveSpec(spec, objective, k)


def plan_report(args: ReportArgs, where: str = "") -> ReportPlan:
    """The one parse of the report's flags: types and numeric bounds (`check_types`), then each flag's own rules."""
    check_types(args, where)
    if args.ks is not None and not args.ks:  # each k is bounded by check_types; an empty list would report nothing
        raise UsageError(f"{where}--ks must be integers >= 1 (and <= n samples per problem), got {args.ks}")
    plan = ReportPlan(
        ks=None if args.ks is None else tuple(args.ks), reward=parse_reward_weights(args.reward_weights, where),
        cvar_q=args.cvar_q, objectives=tuple(parse_objective(o, where) for o in args.objectives),
        bootstrap_samples=args.bootstrap_samples, bootstrap_seed=args.bootstrap_seed, ci_level=args.ci_level,
        breakdown=tuple(args.breakdown), plot=args.plot,
    )
    _check_objective_keys(plan, where)
    return plan


def _check_objective_keys(plan: ReportPlan, where: str) -> None:
    """Each `--objectives` key names one column: compare's tables, its `--metrics` and report.md's rows look metrics
    and objectives up by key, so an entry spelled as a metric's key (`median@4` beside a metric `median@{k}`) or
    given twice would silently stand for another column."""
    from .metrics import METRICS  # local: the metrics load torch and the kernel

    seen: set[str] = set()
    for o in plan.objectives:
        if o.key in seen:
            raise UsageError(f"{where}--objectives gives {o.key!r} twice")
        seen.add(o.key)
        metric = next((m for m in METRICS.values() if m.key_at(o.k if m.per_k else None, plan.config) == o.key), None)
        if metric is not None:
            raise UsageError(f"{where}--objectives {o.text!r} is spelled as the key of the metric {metric.name!r}, "
                             "which the report already holds; spell the preset another way (e.g. its capitalised "
                             "name) or drop the entry")


def as_plan(settings: ReportArgs | ReportPlan, where: str = "") -> ReportPlan:
    """A plan as is; `ReportArgs` (from Python) parsed into one."""
    return settings if isinstance(settings, ReportPlan) else plan_report(settings, where)
