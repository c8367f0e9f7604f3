"""One shot: generate, score and report (each stage resumes, so rerunning after an interruption is cheap).

    python -m eval.run --model <hub id | checkpoint dir | adapter dir> --datasets math500 gsm8k --local_data \\
        --num_samples 16 --ks 1 4 16 --objectives TopM:2@4 --output_dir runs/my_model
    python eval/run.py --config my_eval.yaml          # any field below as a YAML key

Arguments are the union of `eval.generate`, `eval.score` and `eval.report`'s (see `--help`).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python eval/run.py`
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    __package__ = "eval"

from eval.generate import GenerateArgs, PathArgs, generate  # noqa: E402
from eval.report import ReportArgs, report  # noqa: E402
from eval.score import ScoreArgs, score  # noqa: E402


def run(gen_args: GenerateArgs, score_args: ScoreArgs, report_args: ReportArgs, paths: PathArgs) -> dict:
    """Returns {"generate": throughput, "score": throughput, "report": report dict}."""
    gen_stats = generate(gen_args, paths)
    score_stats = score(score_args, paths)
    return {"generate": gen_stats, "score": score_stats, "report": report(report_args, paths)}


def main(argv: list[str] | None = None) -> dict:
    from trl import TrlParser

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    parser = TrlParser((GenerateArgs, ScoreArgs, ReportArgs, PathArgs))
    gen_args, score_args, report_args, paths = parser.parse_args_and_config(argv)
    result = run(gen_args, score_args, report_args, paths)
    print((Path(paths.output_dir) / "report.md").read_text())
    return result


if __name__ == "__main__":
    main()
