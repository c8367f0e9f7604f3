"""The flags of `ordergrad-eval compare` and their checks: each error one line naming the flag and its valid values.

Beyond the report's own (`ReportArgs`: --ks, --objectives, --reward_weights, the bootstrap's) and `--output_dir`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .compare_seeds import parse_contrasts
from .errors import UsageError
from .protocol_header import MISMATCH_FIELDS

__all__ = ["COMPARE_BOUNDS", "CompareArgs", "parse_groups", "runs_as_flag", "validate_compare"]

COMPARE_BOUNDS = {"sign_flip_samples": (1, 10**6), "alpha": (1e-6, 0.5)}


@dataclass
class CompareArgs:
    runs: list[str] = field(
        default_factory=list,
        metadata={"help": "BASE OTHER [OTHER ...]: scored run directories (also positional, first: ordergrad-eval "
                          "compare BASE OTHER --output_dir DIR); each OTHER is reported as OTHER - BASE, paired per "
                          "problem."},
    )
    groups: list[str] = field(
        default_factory=list,
        metadata={"help": "Instead of runs, groups of seeds: NAME=RUN,RUN,... each (at least 2 runs, as many in every "
                          "group; the first group is the baseline; run i of a group pairs with run i of the "
                          "baseline): seed-level paired t intervals, Holm over every metric compared."},
    )
    contrasts: list[str] = field(
        default_factory=list,
        metadata={"help": "With --groups: the family to test instead of every group against the baseline, each "
                          "GROUP-MINUS:METRIC (e.g. max8-max2:pass@8 max2-max8:pass@2), on every dataset; Holm over "
                          "these only (a pre-registered set of endpoints, as the studies' reports)."},
    )
    allow_mismatch: list[str] = field(
        default_factory=list,
        metadata={"help": "Protocol fields on which the runs may differ (the report says so): "
                          f"{', '.join(MISMATCH_FIELDS)}. Any other difference is refused."},
    )
    metrics: list[str] | None = field(
        default=None,
        metadata={"help": "Metric keys to compare, as report.json names them (e.g. pass@1 pass^4 maj@8 TopM:2@4); "
                          "default: every metric report.md shows."},
    )
    sign_flip_samples: int = field(
        default=10000,
        metadata={"help": "Random sign vectors of the paired sign-flip p-value where a metric has more than 16 "
                          "nonzero differences (up to 16 are enumerated exactly). In [1, 1e+06]."},
    )
    alpha: float = field(default=0.05, metadata={"help": "Family-wise error rate of Holm (--groups). In [1e-06, "
                                                         "0.5]."})


def runs_as_flag(argv: list[str]) -> list[str]:
    """`BASE OTHER ... --flags` -> `--runs BASE OTHER ... --flags`: the leading words (before any flag) are runs."""
    lead = 0
    while lead < len(argv) and not argv[lead].startswith("-"):
        lead += 1
    return (["--runs", *argv[:lead]] if lead else []) + argv[lead:]


def parse_groups(groups: list[str]) -> list[tuple[str, list[str]]]:
    """`["base=r1,r2", "ck=r3,r4"]` -> [("base", ["r1", "r2"]), ("ck", ["r3", "r4"])], checked."""
    out: list[tuple[str, list[str]]] = []
    for text in groups:
        name, sep, runs = text.partition("=")
        paths = [r for r in runs.split(",") if r.strip()] if sep else []
        if not sep or not name.strip() or len(paths) != len(runs.split(",")):
            raise UsageError(f"--groups must be NAME=RUN,RUN,... (runs separated by commas, none empty), got {text!r}")
        if any(name == other for other, _ in out):
            raise UsageError(f"--groups names group {name!r} twice; give each group one name")
        if len(paths) < 2:
            raise UsageError(f"--groups {text}: group {name!r} has one run; a seed-level t interval needs at least 2 "
                             "seeds per group (to compare single runs, pass them as BASE OTHER)")
        out.append((name, paths))
    if len(out) < 2:
        raise UsageError("--groups needs at least 2 groups (the baseline first, then those compared with it)")
    sizes = {name: len(paths) for name, paths in out}
    if len(set(sizes.values())) > 1:
        raise UsageError(f"--groups: every group needs as many runs (seed i pairs with seed i), got "
                         f"{', '.join(f'{k} {v}' for k, v in sizes.items())}")
    return out


def validate_compare(args: CompareArgs) -> None:
    if args.runs and args.groups:
        raise UsageError("compare takes runs (BASE OTHER [OTHER ...]) or --groups NAME=RUN,RUN,..., not both")
    if not args.runs and not args.groups:
        raise UsageError("compare needs runs (BASE OTHER [OTHER ...]) or --groups NAME=RUN,RUN,...")
    if args.runs and len(args.runs) < 2:
        raise UsageError(f"compare needs a BASE and at least one OTHER run, got only {args.runs[0]}")
    if args.groups:
        parse_contrasts(args.contrasts, [name for name, _ in parse_groups(args.groups)])
    elif args.contrasts:
        raise UsageError("--contrasts needs --groups (contrasts are between groups of seeds)")
    for name in args.allow_mismatch:
        if name not in MISMATCH_FIELDS:
            raise UsageError(f"--allow_mismatch must name fields among {', '.join(MISMATCH_FIELDS)}, got {name!r}")
    for name, (low, high) in COMPARE_BOUNDS.items():
        value = getattr(args, name)
        if not low <= value <= high:
            raise UsageError(f"--{name} must be in [{low:g}, {high:g}], got {value!r}")
