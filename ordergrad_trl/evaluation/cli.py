"""The command line: `ordergrad-eval run|generate|score|report [flags]`, and `python -m eval.<stage>` in a checkout.

Flags are the fields of the stage's argument classes (`args.py`), parsed by TRL's `TrlParser`; `--config f.yaml`
gives any of them as YAML keys, overridden by flags. Bad input of any kind (a flag's value, an unknown or
mistyped YAML key, a YAML syntax error, a missing config file) prints one line, `<prog>: error: <what, where>`, and
exits with status 2, like argparse, before anything slow starts. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from pathlib import Path

from .args import (
    GenerateArgs,
    PathArgs,
    ReportArgs,
    ScoreArgs,
    check_reward_env,
    check_types,
    check_value,
)
from .compare_args import CompareArgs, runs_as_flag
from .errors import UsageError
from .protocols import apply_protocol
from .report_plan import plan_report
from .signal_plan import PlanArgs

__all__ = ["STAGES", "command", "main", "parse_stage_args", "stage_main"]

STAGES = {
    "run": (GenerateArgs, ScoreArgs, ReportArgs, PathArgs),
    "generate": (GenerateArgs, PathArgs),
    "score": (ScoreArgs, PathArgs),
    "report": (ReportArgs, PathArgs),
    "plan": (PlanArgs,),
    "compare": (CompareArgs, ReportArgs, PathArgs),
}
_ABOUT = {
    "run": "generate, score and report in one go",
    "generate": "sample n completions per problem (resumable)",
    "score": "score the samples with the training reward (math-verify)",
    "report": "metrics with bootstrap CIs: report.json, report.md, passk.png",
    "compare": "paired differences of runs: compare.json, compare.md, compare.png",
    "plan": "before training: which K, estimator and prompt weight carry a signal at your N (plan.json)",
}


def _load_config(path: str) -> dict:
    from ..yaml_config import load_yaml_config

    try:
        return load_yaml_config(path)
    except ValueError as err:
        raise UsageError(str(err)) from None


def parse_stage_args(stage: str, argv: list[str], prog: str) -> tuple:
    """The stage's argument instances from `argv` (and its `--config` file), the report's as its `ReportPlan`;
    UsageError on any bad input."""
    from trl import TrlParser

    class Parser(TrlParser):
        def error(self, message):  # one line naming the flag, not argparse's usage block
            raise UsageError(message)

    parser = Parser(STAGES[stage], prog=prog, description=_ABOUT[stage])
    if stage == "compare":  # `compare BASE OTHER ...`: the leading words are the runs
        argv = runs_as_flag(argv)
    argv = [part for arg in argv for part in (arg.split("=", 1) if arg.startswith("--config=") else [arg])]
    if argv.count("--config") > 1:
        raise UsageError("--config is given more than once; pass one YAML file (flags override its values)")
    config: dict = {}
    if "--config" in argv:
        at = argv.index("--config")
        if at + 1 >= len(argv):
            raise UsageError("--config needs a YAML file path")
        path = argv[at + 1]
        del argv[at : at + 2]
        config = _load_config(path)
        env = config.pop("env", {})
        if not isinstance(env, dict):
            raise UsageError(f"--config {path}: env must be a mapping of variable names to values")
        owner = {f.name: cls for cls in STAGES[stage] for f in dataclasses.fields(cls)}
        unknown = [k for k in config if k not in owner]
        if unknown:
            raise UsageError(f"--config {path}: unknown key(s) {', '.join(map(str, unknown))} for {prog}; see "
                             f"{prog} --help")
        for key, value in config.items():  # before argparse, which would convert strings without naming the file
            check_value(owner[key], key, value, f"--config {path}: ")
        os.environ.update({str(k): str(v) for k, v in env.items()})
        parser.set_defaults_with_config(**config)
    *parsed, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if unknown:
        raise UsageError(f"unrecognized arguments: {' '.join(unknown)}; see {prog} --help")
    # --protocol fills the preset fields no flag (nor config key) gave: a flag given overrides its preset value
    given = {a[2:].split("=", 1)[0] for a in argv if a.startswith("--")}
    given |= {g[3:] for g in given if g.startswith("no_")} | set(config)
    # the config's values are checked above: what fails here came from the command line; the report's flags are
    # parsed once, here, into the plan every later stage reads
    parsed = [plan_report(obj) if isinstance(obj, ReportArgs) else check_types(obj) or obj for obj in parsed]
    parsed = [apply_protocol(obj, given) if isinstance(obj, GenerateArgs) else obj for obj in parsed]
    if any(isinstance(obj, ScoreArgs) for obj in parsed):  # the scorer's environment, before any work
        check_reward_env()
    return tuple(parsed)


def _execute(stage: str, parsed: tuple) -> dict:
    if stage == "compare":
        from .compare import COMPARE_MD, run_compare

        result = run_compare(*parsed)
        print((Path(parsed[-1].output_dir).expanduser().resolve() / COMPARE_MD).read_text(encoding="utf-8"))
        return result
    if stage == "plan":
        from .signal_plan import run_plan

        return run_plan(*parsed)
    if stage == "generate":
        from .generate import generate

        stats = generate(*parsed)
        print(json.dumps(stats, indent=2))
        return stats
    if stage == "score":
        from .score import score

        stats = score(*parsed)
        print(json.dumps(stats, indent=2))
        return stats
    from .layout import REPORT_MD, run_dir

    if stage == "run":
        from .run import run

        result = run(*parsed)
    else:
        from .report import report

        result = report(*parsed)
    print((run_dir(parsed[-1].output_dir) / REPORT_MD).read_text(encoding="utf-8"))
    return result


def stage_main(stage: str, argv: list[str] | None = None, prog: str | None = None) -> dict:
    """Run one stage as a command: logging set up, a UsageError printed as `prog: error: ...` with exit status 2."""
    prog = prog or f"ordergrad-eval {stage}"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        return _execute(stage, parse_stage_args(stage, sys.argv[1:] if argv is None else argv, prog))
    except UsageError as err:
        print(f"{prog}: error: {' '.join(str(err).splitlines())}", file=sys.stderr)
        raise SystemExit(2) from None


def command(argv: list[str] | None = None) -> dict | None:
    """`ordergrad-eval <stage> [flags]`, returning what the stage returns (None for --help)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in STAGES:
        lines = [f"usage: ordergrad-eval {{{','.join(STAGES)}}} [flags]  (<stage> --help lists its flags)", ""]
        lines += [f"  {name:<9} {about}" for name, about in _ABOUT.items()]
        if argv and argv[0] not in ("-h", "--help"):
            print(f"ordergrad-eval: error: unknown stage {argv[0]!r}; choose from {', '.join(STAGES)}",
                  file=sys.stderr)
            raise SystemExit(2)
        print("\n".join(lines), file=sys.stdout if argv else sys.stderr)
        if not argv:
            raise SystemExit(2)
        return None
    return stage_main(argv[0], argv[1:])


def main(argv: list[str] | None = None) -> None:
    """The console script `ordergrad-eval` (its exit status is 0, or 2 for bad input)."""
    command(argv)


if __name__ == "__main__":
    main()
