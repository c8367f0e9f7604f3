"""One shot: generate, score and report (each stage resumes, so rerunning after an interruption is cheap).

    python -m eval.run --model <hub id | checkpoint dir | adapter dir> --datasets math500 gsm8k --local_data \\
        --num_samples 16 --ks 1 4 16 --objectives TopM:2@4 --output_dir runs/my_model
    python -m eval.run --config my_eval.yaml          # any field below as a YAML key

Arguments are the union of `eval.generate`, `eval.score` and `eval.report`'s (see `--help`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python eval/run.py`
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    __package__ = "eval"

from eval.cli import UsageError, cli, run_dir  # noqa: E402
from eval.generate import GenerateArgs, PathArgs, generate  # noqa: E402
from eval.report import ReportArgs, check_args, parse_objective, report  # noqa: E402
from eval.score import ScoreArgs, score  # noqa: E402


def run(gen_args: GenerateArgs, score_args: ScoreArgs, report_args: ReportArgs, paths: PathArgs) -> dict:
    """Returns {"generate": throughput, "score": throughput, "report": report dict}."""
    # a k the samples cannot support fails now, not after hours of generation
    check_args(report_args)
    n = gen_args.num_samples
    big = [str(k) for k in report_args.ks or [] if k > n]
    big += [o for o in report_args.objectives if parse_objective(o)[1] > n]
    if big:
        raise UsageError(f"--ks / --objectives {' '.join(big)}: k > --num_samples {n}; every k must be <= n")
    gen_stats = generate(gen_args, paths)
    score_stats = score(score_args, paths)
    return {"generate": gen_stats, "score": score_stats, "report": report(report_args, paths)}


def _main(argv: list[str] | None) -> dict:
    from trl import TrlParser

    parser = TrlParser((GenerateArgs, ScoreArgs, ReportArgs, PathArgs))
    gen_args, score_args, report_args, paths = parser.parse_args_and_config(argv)
    result = run(gen_args, score_args, report_args, paths)
    print((run_dir(paths.output_dir) / "report.md").read_text())
    return result


def main(argv: list[str] | None = None) -> dict:
    return cli(_main, "eval.run", argv)


if __name__ == "__main__":
    main()
