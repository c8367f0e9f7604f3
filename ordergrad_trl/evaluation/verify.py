"""One check of a run directory against its `provenance.json`, made by every stage before it reads the run.

What the provenance records must be what the files hold, or a stage would score, report or resume numbers of
something else: a gold edited by hand, a `scores.jsonl` copied in from another run, a dataset folder whose entry was
deleted (a rerun would take its problems for another file's). `check_run(out, stage)` reads every row file of
every dataset (rows schema-checked by `records`) and raises `RunMismatchError`, one line naming the file, the row
(file:line) and the change, at the first of:

- a dataset folder (`layout.dataset_dirs`, the one list every stage reads, hidden folders included) without an
  entry in `provenance.json`, or a run without `provenance.json`; a dataset folder or row file that is a symbolic
  link (its rows would be another run's, and a write through it would land there);
- `problems.jsonl` not what the provenance recorded: a problem added, removed or reordered, its question or gold
  changed (per-row checksums), or the whole not hashing to `problems_sha256`. `generate` writes the provenance
  before the problems, so for it (`stage="generate"`) a file that is a prefix of the record is a run killed in
  between, not a mismatch;
- a generation of a problem id not in `problems.jsonl`, a sample index outside `[0, n)` (n: the largest
  `--num_samples` the provenance recorded for the dataset), or a row whose tag (`generation_tag`) says another
  model, prompt, sampling settings or problem made it (a generations file copied in from another run); every row
  must carry its tag (no key of the provenance turns this off);
- a score of an unknown id or sample index, or (in `report`) of a sample that was not generated or whose
  completion is not the one it scored (the row's checksum). `score` rescores those instead (`_check_scores(..., stale_ok=True)`).

Each row's own check (fields edited by hand) and the provenance's are verified by their readers
(`records.read_numbered`, `provenance.read_provenance`), which every path here goes through.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from . import layout, records, safe_io
from .errors import UsageError
from .problems import problems_index, problems_sha256
from .provenance import read_provenance

__all__ = ["RunMismatchError", "check_run", "generation_tag", "run_mismatch"]

_HINT = "the run was edited or mixed with another; restore it, or regenerate into a new --output_dir"


class RunMismatchError(UsageError):
    """A run directory's files do not match its provenance.json."""


def _no_links(folder: Path) -> None:
    safe_io.refuse_link(folder, RunMismatchError)
    for p in sorted(folder.iterdir()):
        if layout.kind_of(p):
            safe_io.refuse_link(p, RunMismatchError)


def _check_problems(path: Path, entry: dict, strict: bool) -> dict[str, dict]:
    rows = records.read_numbered(path, "problems")
    recorded = entry.get("problems_index")
    if isinstance(recorded, list):
        now = problems_index([r for _, r in rows])
        for (line, row), new, old in zip(rows, now, recorded):
            if not isinstance(old, list) or len(old) != 3 or old[0] != new[0]:
                was = old[0] if isinstance(old, list) and old else old
                raise RunMismatchError(f"{path}:{line}: problem {row['id']!r} where provenance.json recorded {was!r} "
                                       f"(a problem added, removed or reordered); {_HINT}")
            for at, what, fld in ((1, "question", "question"), (2, "gold", "answer")):
                if old[at] != new[at]:
                    raise RunMismatchError(f"{path}:{line}: the {what} of problem {row['id']!r} is not the one "
                                           f"provenance.json recorded (now {str(row.get(fld))[:40]!r}); {_HINT}")
        if len(rows) > len(recorded):
            line, row = rows[len(recorded)]
            raise RunMismatchError(f"{path}:{line}: problem {row['id']!r} is not in provenance.json (added after the "
                                   f"run recorded {len(recorded)} problems); {_HINT}")
        if len(rows) < len(recorded) and strict:
            raise RunMismatchError(f"{path}: {len(rows)} problems where provenance.json recorded {len(recorded)} "
                                   f"(first missing: {recorded[len(rows)][0]!r}); rerun generate with the same flags "
                                   f"to finish writing the run, or {_HINT.split('; ')[1]}")
    if strict and problems_sha256([r for _, r in rows]) != entry.get("problems_sha256"):
        raise RunMismatchError(f"{path}: its problems do not hash to provenance.json's problems_sha256 (ids, "
                               f"questions or golds changed after the run recorded them); {_HINT}")
    return {r["id"]: r for _, r in rows}


def generation_tag(provenance: dict, problem: dict) -> int:
    """The tag every generation row of `problem` carries: a checksum of what made it (the model's content or Hub
    name, the prompt and sampling settings) and of the problem (id, question, gold), so a row copied in from a run
    of another model, settings or data is told apart even where the problem ids agree."""
    model = provenance["model"]
    fp = model.get("fingerprint") or {}
    made_by = [(fp.get(r) or {}).get("sha256") or model.get(r) for r in ("base", "adapter")]
    what = [made_by, provenance["prompt"], provenance["sampling"], problem["id"], problem.get("question"),
            problem["answer"]]
    return zlib.crc32(records.canonical(what))


def _check_generations(folder: Path, problems: dict, n: int, provenance: dict, pending=frozenset()) -> dict:
    """`pending`: ids provenance.json records but a cut problems.jsonl lost (generate only): their rows are kept
    for generate to restore the file; their tags are checked by every later stage, once it is whole again."""
    samples: dict[tuple[str, int], tuple[str, int, dict]] = {}
    tags: dict[str, int] = {}
    for file in layout.generation_files(folder):
        for line, row in records.read_numbered(file, "generations"):
            if row["id"] in pending and row["id"] not in problems:
                _check_key(file, line, row, pending, n, "generation")
                samples.setdefault((row["id"], row["sample"]), (file.name, line, row))
                continue
            _check_key(file, line, row, problems, n, "generation")
            want = tags.get(row["id"])
            if want is None:
                want = tags[row["id"]] = generation_tag(provenance, problems[row["id"]])
            if row["tag"] != want:
                raise RunMismatchError(f"{file}:{line}: sample {row['sample']} of problem {row['id']!r} was not "
                                       f"made by this run (tag {row['tag']}, this run's {want}: another "
                                       f"model, settings or data; copied from another run?); {_HINT}")
            samples.setdefault((row["id"], row["sample"]), (file.name, line, row))
    return samples


def _check_key(file: Path, line: int, row: dict, ids, n: int, what: str) -> None:
    if row["id"] not in ids:
        raise RunMismatchError(f"{file}:{line}: a {what} of problem {row['id']!r}, which is not in problems.jsonl; "
                               f"{_HINT}")
    if row["sample"] >= n:
        raise RunMismatchError(f"{file}:{line}: sample {row['sample']} of problem {row['id']!r} is outside [0, {n}) "
                               f"(provenance.json: num_samples {n}); {_HINT}")


def _check_scores(file: Path, ids, n: int, samples: dict, stale_ok: bool) -> None:
    for line, row in records.read_numbered(file, "scores"):
        _check_key(file, line, row, ids, n, "score")
        if stale_ok:
            continue
        gen = samples.get((row["id"], row["sample"]))
        if gen is None:
            raise RunMismatchError(f"{file}:{line}: a score of problem {row['id']!r} sample {row['sample']}, which "
                                   "was never generated (copied from another run?); run the score stage, which "
                                   "drops it, or use a new --output_dir")
        crc = records.completion_crc(gen[2]["completion"])
        if row["crc"] != crc:
            raise RunMismatchError(f"{file}:{line}: the score of problem {row['id']!r} sample {row['sample']} was "
                                   f"made for another completion (checksum {row['crc']}, {gen[0]}:{gen[1]} has "
                                   f"{crc}: copied from another run, or regenerated); run the score stage to rescore")


def check_run(out: str | os.PathLike, stage: str, provenance: dict | None = None) -> dict:
    """Verify run directory `out` before `stage` (generate, score, report) reads it; returns its provenance.

    RunMismatchError (a UsageError: one line, exit 2 at the command line) at the first mismatch.
    """
    out = Path(out)
    if stage == "report" and out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"--output_dir {out}: cannot write the report there (permission denied); pass a writable "
                         "directory")
    provenance = provenance if provenance is not None else read_provenance(out)
    folders = layout.dataset_dirs(out)
    if provenance is None:
        if folders:
            raise RunMismatchError(f"{out / layout.PROVENANCE}: missing, so the run's {folders[0].name} cannot be "
                                   "checked (written by an earlier version, or the file was deleted); regenerate "
                                   "into a new --output_dir, or pass --overwrite to move this run aside")
        return {}
    datasets = provenance["datasets"]
    for key, entry in datasets.items():
        if not isinstance(entry, dict):
            raise RunMismatchError(f"{out / layout.PROVENANCE}: the entry of dataset {key!r} is not a record (edited "
                                   "by hand?); restore it, or pass --overwrite to move this run aside")
    for folder in folders:
        entry = datasets.get(folder.name)
        if not isinstance(entry, dict):
            raise RunMismatchError(f"{folder}: a dataset folder without an entry in {out / layout.PROVENANCE} (the "
                                   "entry was deleted, or the folder copied in); its problems cannot be told from "
                                   "another file's of the same name; move the folder away or use a new --output_dir")
        _no_links(folder)
        n = entry.get("num_samples")
        if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
            raise RunMismatchError(f"{out / layout.PROVENANCE}: dataset {folder.name!r} records num_samples {n!r}, "
                                   "not an integer >= 1; restore it, or pass --overwrite to move this run aside")
        problems = _check_problems(folder / "problems.jsonl", entry, strict=stage != "generate")
        recorded = entry.get("problems_index")
        pending = {r[0] for r in recorded[len(problems):] if isinstance(r, list) and r} \
            if stage == "generate" and isinstance(recorded, list) else frozenset()
        samples = _check_generations(folder, problems, n, provenance, pending)
        if stage != "generate":
            _check_scores(folder / "scores.jsonl", problems, n, samples, stale_ok=stage == "score")
    return provenance


def run_mismatch(out: Path, provenance: dict, stage: str = "generate") -> str | None:
    """The mismatch `check_run` would raise, as text (None if none): for callers that weigh it with others."""
    try:
        check_run(out, stage, provenance)
    except UsageError as err:
        return str(err).split("; ")[0]
    return None
