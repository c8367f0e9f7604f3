"""Evaluation of math models for order-statistic objectives: generate -> score -> report, from Python or the shell.

    from ordergrad_trl.evaluation import evaluate

    report = evaluate("runs/train/checkpoint-500", output_dir="runs/ck500", datasets=["gsm8k"], num_samples=16,
                      ks=[1, 4, 16], objectives=["TopM:2@4"])
    report["datasets"]["gsm8k"]["metrics"]["pass@4"]["value"]

The same as `ordergrad-eval run ...` (the console script; stages `run`, `generate`, `score`, `report`).
Modules: `plan` (arguments, data, provenance, what is pending) feeds `sampling` / `parallel` (backends, the
worker loop); `score`, `report` (with `report_plan`, `metrics`, `metric_inputs`, `render`) read the run's
`records` (files laid out by `layout`, written through `safe_io`). See docs/evaluation.md.
"""

import importlib

from .args import GenerateArgs, PathArgs, ReportArgs, ScoreArgs
from .errors import MissingPathError, UsageError


def __getattr__(name):
    if name == "evaluate":  # the stages import torch and the tasks: load them on first use
        return importlib.import_module(".run", __name__).evaluate
    if name == "plan_settings":  # `ordergrad-eval plan` from Python (not `plan`: that module plans generation)
        return importlib.import_module(".signal_plan", __name__).plan_settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GenerateArgs", "MissingPathError", "PathArgs", "ReportArgs", "ScoreArgs", "UsageError", "evaluate",
           "plan_settings"]
