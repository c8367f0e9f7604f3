"""Stage 2: score every generated sample with the training reward code and append the scores to JSONL.

    python -m eval.score --output_dir runs/smollm2

Correctness is `ordergrad_trl.tasks.rewards.score_completions`, the function behind the training reward `math_reward`:
math-verify in the same bounded pool of worker processes (hard wall-clock timeout per item). Per sample it writes
`correct` (1.0 / 0.0; null when the gold does not parse), `status` (`ok`, `timeout`: math-verify ran out of time,
so 0.0, or null when it was the gold's parse; `unscorable`: the gold parses to nothing), `format` (`format_reward`:
exactly one closed `\\boxed{}`), `pred` (the normalized final answer used for majority voting) and a checksum of the
completion.
Resumable: samples already scored (same checksum) are skipped.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as `python eval/score.py`
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    __package__ = "eval"

from eval import records  # noqa: E402
from eval.answers import extract_answer  # noqa: E402
from eval.cli import UsageError, cli, progress, require_run  # noqa: E402
from eval.generate import PathArgs  # noqa: E402

logger = logging.getLogger("eval.score")


@dataclass
class ScoreArgs:
    reward_timeout_s: float = field(
        default=10.0, metadata={"help": "Hard wall-clock bound per scored sample, and per gold parse (a slower "
                                "sample scores 0, a slower gold leaves the problem unscorable), as in training."}
    )
    reward_workers: int | None = field(
        default=None, metadata={"help": "math-verify worker processes (default: as in training, min(4, cpus))."}
    )
    score_chunk: int = field(default=512, metadata={"help": "Samples scored per call; scores are saved per chunk."})


def score_dataset(dataset_dir: Path, args: ScoreArgs, disable_tqdm: bool = False) -> dict:
    from ordergrad_trl.tasks.rewards import format_reward, score_completions

    golds = {p["id"]: str(p["answer"]) for p in records.read_jsonl(dataset_dir / "problems.jsonl")}
    samples = records.read_samples(dataset_dir)
    out = dataset_dir / "scores.jsonl"
    records.repair_tail(out)
    scored = {(r["id"], int(r["sample"])): r for r in records.read_jsonl(out)}
    todo = []
    for key, row in samples.items():
        old = scored.get(key)
        if old is None or old.get("crc") != records.completion_crc(row["completion"]):
            if key[0] not in golds:
                raise ValueError(f"{dataset_dir}: sample of unknown problem id {key[0]!r} (not in problems.jsonl)")
            todo.append(row)
    if any(k in scored for k in ((r["id"], int(r["sample"])) for r in todo)):
        # a completion changed under an existing score: rewrite the file without the stale rows
        stale = {(r["id"], int(r["sample"])) for r in todo}
        records.write_jsonl_atomic(out, [r for k, r in scored.items() if k not in stale])
    t0, failures = time.perf_counter(), {"timeout": 0, "unscorable": 0}
    bar = progress(len(todo), f"score {dataset_dir.name}", "sample", disable_tqdm)
    for start in range(0, len(todo), args.score_chunk):
        chunk = todo[start : start + args.score_chunk]
        texts = [r["completion"] for r in chunk]
        correct, status = score_completions(
            texts, [golds[r["id"]] for r in chunk], timeout_s=args.reward_timeout_s, num_workers=args.reward_workers,
            return_status=True,
        )
        for s in status:
            failures[s] = failures.get(s, 0) + 1
        fmt = format_reward(texts)
        records.append_jsonl(out, [
            {"id": r["id"], "sample": int(r["sample"]), "correct": c, "status": st, "format": f,
             "pred": extract_answer(t), "crc": records.completion_crc(t)}
            for r, c, st, f, t in zip(chunk, correct, status, fmt, texts)
        ])
        bar.update(len(chunk))
        logger.info("%s: scored %d/%d", dataset_dir.name, start + len(chunk), len(todo))
    bar.close()
    seconds = time.perf_counter() - t0
    return {"scored": len(todo), "timeouts": failures["timeout"], "unscorable": failures["unscorable"],
            "seconds": seconds, "samples_per_s": len(todo) / seconds if todo else None}


def score(args: ScoreArgs, paths: PathArgs) -> dict:
    for name, ok, rule in [("reward_timeout_s", args.reward_timeout_s > 0, "> 0"),
                           ("reward_workers", args.reward_workers is None or args.reward_workers >= 1, ">= 1"),
                           ("score_chunk", args.score_chunk >= 1, ">= 1")]:
        if not ok:
            raise UsageError(f"--{name} must be {rule}, got {getattr(args, name)!r}")
    out, dirs = require_run(paths.output_dir, "score")
    return {d.name: score_dataset(d, args, paths.disable_tqdm) for d in dirs}


def _main(argv: list[str] | None) -> dict:
    from trl import TrlParser

    score_args, paths = TrlParser((ScoreArgs, PathArgs)).parse_args_and_config(argv)
    stats = score(score_args, paths)
    print(json.dumps(stats, indent=2))
    return stats


def main(argv: list[str] | None = None) -> dict:
    return cli(_main, "eval.score", argv)


if __name__ == "__main__":
    main()
