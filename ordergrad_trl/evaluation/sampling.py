"""The sampling loop: generate a planned list of (problem, sample) units and append each finished batch to JSONL.

Runs in the parent process or in a data-parallel worker (`parallel.py`); it gets everything planned already
(prompt token ids, a plain model source, the tokenizer) and only samples and writes. Seeds: vLLM seeds every
sample from (seed, dataset, problem id, sample index); the hf backend seeds every batch from its first sample, so a
rerun with the same batch size reproduces the same samples.
"""

from __future__ import annotations

import collections
import logging
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from . import records
from .progress import progress

logger = logging.getLogger(__name__)

__all__ = ["Work", "generate_local", "reference_units", "sample_seed"]


@dataclass
class Work:
    """One dataset's share: problem ids, their prompt token ids (None for the reference backend), reference
    completions (reference backend only) and the (problem index, sample index) units still to generate."""

    ids: list[str]
    prompts: list[list[int] | None]
    units: list[tuple[int, int]]
    tags: list[int]  # per problem: ties each row to this run and problem (`verify.generation_tag`)
    solutions: list[str] | None = None


def sample_seed(seed: int, key: str, pid: str, sample: int) -> int:
    return zlib.crc32(f"{seed}:{key}:{pid}:{sample}".encode()) & 0x7FFFFFFF


def _run_units(backend, key: str, work: Work, out_file: Path, seed: int, bar_opts: dict) -> dict:
    """Generate one dataset's units, appending each finished batch to out_file."""
    records.repair_tail(out_file)
    units = work.units
    prompts = [work.prompts[i] for i, _ in units]
    seeds = [sample_seed(seed, key, work.ids[i], s) for i, s in units]
    left = collections.Counter(i for i, _ in units)  # samples still to come per problem
    bar = progress(len(units), f"generate {key}", "sample", **bar_opts)
    t0, tokens, done, problems_done = time.perf_counter(), 0, 0, 0
    for start, results in backend.generate(prompts, seeds):
        rows = []
        for (i, s), (text, count, finish) in zip(units[start : start + len(results)], results):
            rows.append({"id": work.ids[i], "sample": s, "completion": text, "num_tokens": count,
                         "finish_reason": finish, "tag": work.tags[i]})
            tokens += count
            left[i] -= 1
            problems_done += left[i] == 0
        records.append_jsonl(out_file, rows)
        done += len(rows)
        rate = tokens / max(time.perf_counter() - t0, 1e-9)
        bar.set_postfix_str(f"problems {problems_done}/{len(left)}, {rate:.0f} tok/s", refresh=False)
        bar.update(len(rows))
        logger.info("%s: %d/%d samples, %d/%d problems, %.1f tok/s", key, done, len(units), problems_done,
                    len(left), rate)
    bar.close()
    return {"samples": done, "tokens": tokens, "seconds": time.perf_counter() - t0}


def reference_units(key_dir: Path, work: Work) -> dict:
    """The reference backend: every unit's completion is its problem's reference solution."""
    out = key_dir / "generations.jsonl"
    records.repair_tail(out)
    rows = [{"id": work.ids[i], "sample": s, "completion": work.solutions[i], "num_tokens": None,
             "finish_reason": "reference", "tag": work.tags[i]} for i, s in work.units]
    records.append_jsonl(out, rows)
    return {"samples": len(rows), "tokens": 0, "seconds": 0.0}


def generate_local(args, out: Path, backend_name: str, source, tok, work: dict[str, Work], file_name: str,
                   rank: int = 0, disable_tqdm: bool = False) -> dict:
    """Generate `work` {dataset: Work} in this process, appending to `<dataset>/<file_name>`.

    `source` is a plain checkpoint for vLLM (an adapter merged beforehand); the hf backend merges one itself."""
    from .backends import HFBackend, VLLMBackend

    backend = VLLMBackend(source, tok, args) if backend_name == "vllm" else HFBackend(source, tok, args)
    bar_opts = dict(disable=disable_tqdm, position=rank, leave=rank == 0)
    return {key: _run_units(backend, key, w, out / key / file_name, args.seed, bar_opts)
            for key, w in work.items() if w.units}
