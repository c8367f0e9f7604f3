"""One shot, from the shell (`run`) or from Python (`evaluate`): generate, score and report.

Each stage resumes, so rerunning after an interruption is cheap.

    ordergrad-eval run --model <hub id | checkpoint dir | adapter dir> --datasets math500 gsm8k --local_data \\
        --num_samples 16 --ks 1 4 16 --objectives TopM:2@4 --output_dir runs/my_model
    ordergrad-eval run --config my_eval.yaml          # any field below as a YAML key
"""

from __future__ import annotations

import dataclasses
import os

from . import layout
from .args import (
    GenerateArgs,
    PathArgs,
    ReportArgs,
    ScoreArgs,
    check_types,
    validate_generate,
    validate_score,
)
from .errors import UsageError
from .generate import generate
from .lock import writer_lock
from .protocols import apply_protocol
from .report import report
from .report_plan import ReportPlan, as_plan
from .score import score

__all__ = ["evaluate", "run"]

_GROUPS = (GenerateArgs, ScoreArgs, ReportArgs, PathArgs)


def run(gen_args: GenerateArgs, score_args: ScoreArgs, report_settings: ReportArgs | ReportPlan,
        paths: PathArgs) -> dict:
    """Returns {"generate": throughput, "score": throughput, "report": report dict}; `report_settings` are the
    report's flags or their plan (`report_plan.plan_report`)."""
    plan = as_plan(report_settings)
    # a k the samples cannot support fails now, not after hours of generation
    n = gen_args.num_samples
    big = [str(k) for k in plan.ks or () if k > n]
    big += [o.text for o in plan.objectives if o.k > n]
    if big:
        raise UsageError(f"--ks / --objectives {' '.join(big)}: k > --num_samples {n}; every k must be <= n")
    validate_generate(gen_args)
    validate_score(score_args)
    with writer_lock(layout.run_dir(paths.output_dir), "run"):  # one writer from the first sample to the report
        gen_stats = generate(gen_args, paths)
        score_stats = score(score_args, paths)
        return {"generate": gen_stats, "score": score_stats, "report": report(plan, paths)}


def _plain(value):
    """A numpy (or other `numbers`) scalar as the Python int / float / bool it holds, in lists too: np.int32(20)
    is an integer; a bool stays a bool."""
    import numbers

    if isinstance(value, list):
        return [_plain(v) for v in value]
    if type(value) in (bool, int, float) or value is None or isinstance(value, str):
        return value
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def _split_options(options: dict, groups) -> list:
    """One instance per dataclass in `groups` from keyword options (the report's as its `ReportPlan`); an unknown
    option is a UsageError."""
    names = {f.name: cls for cls in groups for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise UsageError(f"evaluate(): unknown option(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
    options = {k: _plain(v) for k, v in options.items()}
    parsed = [cls(**{k: v for k, v in options.items() if names[k] is cls}) for cls in groups]
    # the command line's type checks (disable_tqdm="false" is not a bool, as --ks "4" is no list), the report's in
    # its one parse
    where = "evaluate(): "
    parsed = [as_plan(obj, where) if isinstance(obj, ReportArgs) else check_types(obj, where) or obj for obj in parsed]
    # protocol=...: its preset fills every preset field not passed as a keyword (a keyword overrides it)
    return [apply_protocol(obj, options, where) if isinstance(obj, GenerateArgs) else obj for obj in parsed]


def evaluate(model: str | None = None, *, output_dir: str | os.PathLike | None = None,
             generations: str | os.PathLike | None = None, **options) -> dict:
    """Evaluate a model, or a directory of generations, and return the report (what `report.json` holds).

    Either `evaluate(model, output_dir=..., **options)`: generate, score and report, as `ordergrad-eval run`
    (`model` is a Hub id, checkpoint or adapter directory; None is the default model, or pass
    `backend="reference"`); or `evaluate(generations=run_dir, **options)`: score what an earlier run generated into
    `run_dir` and report, as `ordergrad-eval score` then `report`. `options` are the command-line flags as
    keywords, e.g. `datasets=["gsm8k"], num_samples=16, ks=[1, 4, 16], objectives=["TopM:2@4"]`; every stage
    resumes what the directory already holds, and bad values raise `UsageError` (a `ValueError`) naming the flag.

    Returns `{"datasets": {name: {"metrics": {"pass@1": {"value", "ci", "num_problems"}, ...}, ...}},
    "provenance": ..., "config": ..., ...}`; `report.md` and `passk.png` are written beside `report.json`.
    """
    if generations is not None:
        if model is not None or output_dir is not None:
            raise UsageError("evaluate(): pass either generations= (score and report a run directory) or a model "
                             "and output_dir=, not both")
        # the report's flags are parsed here, before scoring: a bad one fails before the slow part
        score_args, plan, paths = _split_options({**options, "output_dir": os.fspath(generations)},
                                                 (ScoreArgs, ReportArgs, PathArgs))
        score(score_args, paths)
        return report(plan, paths)
    out = PathArgs.output_dir if output_dir is None else os.fspath(output_dir)  # "" is refused by name, not replaced
    opts = {**options, "model": model, "output_dir": out}
    return run(*_split_options(opts, _GROUPS))["report"]
