"""Stage 2: score every generated sample with the training reward code and append the scores to JSONL.

    ordergrad-eval score --output_dir runs/smollm2

Correctness is `ordergrad_trl.tasks.rewards.score_completions`, the function behind the training reward `math_reward`:
math-verify in the same bounded pool of worker processes (hard wall-clock timeout per item). Per sample it writes
`correct` (1.0 / 0.0; null when the gold does not parse), `status` (`ok`, `timeout`: math-verify ran out of time,
so 0.0, or null when it was the gold's parse; `unscorable`: the gold parses to nothing), `format` (`format_reward`:
exactly one closed `\\boxed{}`), `pred` (the normalized final answer used for majority voting) and a checksum of the
completion.
Resumable: samples already scored (same checksum) are skipped; a score whose completion changed, or of a sample
that is not in the run, is dropped and (the former) rescored. The run is verified first (`verify.check_run`) and
locked against other writers for the whole stage (`lock.writer_lock`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from . import layout, records
from .answers import extract_answer
from .args import PathArgs, ScoreArgs, validate_score
from .errors import UsageError
from .lock import acquire, writer_lock
from .progress import progress
from .protocol_header import grader_entry
from .provenance import write_provenance
from .verify import check_run

logger = logging.getLogger(__name__)

__all__ = ["score", "score_dataset"]


def score_dataset(dataset_dir: Path, args: ScoreArgs, disable_tqdm: bool = False) -> dict:
    from ordergrad_trl.tasks.rewards import format_reward, score_completions

    golds = {p["id"]: p["answer"] for p in records.read_jsonl(dataset_dir / "problems.jsonl", "problems")}
    samples = records.read_samples(dataset_dir)
    out = dataset_dir / "scores.jsonl"
    records.repair_tail(out)
    scored = {(r["id"], r["sample"]): r for r in records.read_jsonl(out, "scores")}  # the first of a key
    todo = []
    for key, row in samples.items():
        old = scored.get(key)
        if old is None or old["crc"] != records.completion_crc(row["completion"]):
            if key[0] not in golds:
                raise UsageError(f"{dataset_dir}: sample of unknown problem id {key[0]!r} (not in problems.jsonl)")
            todo.append(row)
    stale = {(r["id"], r["sample"]) for r in todo} | (scored.keys() - samples.keys())
    if stale & scored.keys():
        # a completion changed under an existing score, or a score of no sample: rewrite the file without them
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
        rows = [{"id": r["id"], "sample": r["sample"], "correct": c, "status": st, "format": f,
                 "pred": extract_answer(t), "crc": records.completion_crc(t)}
                for r, c, st, f, t in zip(chunk, correct, status, fmt, texts)]
        records.append_jsonl(out, rows)  # each row stamped with its check
        bar.update(len(chunk))
        logger.info("%s: scored %d/%d", dataset_dir.name, start + len(chunk), len(todo))
    bar.close()
    seconds = time.perf_counter() - t0
    return {"scored": len(todo), "timeouts": failures["timeout"], "unscorable": failures["unscorable"],
            "seconds": seconds, "samples_per_s": len(todo) / seconds if todo else None}


def score(args: ScoreArgs, paths: PathArgs) -> dict:
    """Score every generated sample not scored yet; returns stats {dataset: {...}}."""
    validate_score(args)
    out, dirs = layout.require_run(paths.output_dir, "score")
    with writer_lock(out, "score"):
        acquire(out)
        provenance = check_run(out, "score")
        stats = {d.name: score_dataset(d, args, paths.disable_tqdm) for d in dirs}
        if provenance:  # the grader's version joins the run's protocol header (`protocol_header`)
            grader = grader_entry(provenance.get("grader"), args.reward_timeout_s)
            if grader != provenance.get("grader"):
                write_provenance(out, {k: v for k, v in dict(provenance, grader=grader).items() if k != "check"})
        return stats
