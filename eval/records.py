"""On-disk layout of an evaluation run and crash-safe JSONL helpers.

    <output_dir>/
        generation_config.json        settings that change the sample distribution (checked on resume)
        <dataset>/problems.jsonl      one row per problem: id, answer (gold), prompt (messages), metadata
        <dataset>/generations*.jsonl  one row per sample: id, sample, completion, num_tokens, finish_reason
                                      (one file per data-parallel rank: generations.rank<r>.jsonl)
        <dataset>/scores.jsonl        one row per sample: id, sample, correct, format, pred, crc
        report.json / report.md / passk.png

Appends are flushed and fsynced per batch, so a killed process loses at most the batch in flight; a torn last
line (killed mid-write) is cut off before the next append and ignored by readers. Rows are keyed by
(id, sample); the first row of a key wins.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "GEN_GLOB",
    "append_jsonl",
    "completion_crc",
    "dataset_dirs",
    "read_jsonl",
    "read_samples",
    "repair_tail",
    "write_json_atomic",
    "write_jsonl_atomic",
]

GEN_GLOB = "generations*.jsonl"


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Rows of a JSONL file ([] if absent). A torn last line is skipped; a bad line elsewhere raises ValueError."""
    path = Path(path)
    if not path.is_file():
        return []
    rows, lines = [], path.read_text(encoding="utf-8").split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if i == len(lines) - 1:  # no trailing newline: a write cut short by a kill
                break
            raise ValueError(f"{path}:{i + 1}: not valid JSON ({err}); the file is corrupt") from err
    return rows


def repair_tail(path: str | os.PathLike) -> None:
    """Cut a torn last line (anything after the last newline) so that appends start on a fresh line."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data.endswith(b"\n"):
            return
        f.truncate(data.rfind(b"\n") + 1)


def append_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """Append rows and fsync, so that finished work survives a kill of this process or of the machine."""
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if not text:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, path)


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_samples(dataset_dir: str | os.PathLike) -> dict[tuple[str, int], dict]:
    """All generated samples of one dataset directory, merged over rank files: {(id, sample): row}."""
    out: dict[tuple[str, int], dict] = {}
    for file in sorted(Path(dataset_dir).glob(GEN_GLOB)):
        for row in read_jsonl(file):
            out.setdefault((row["id"], int(row["sample"])), row)
    return out


def dataset_dirs(output_dir: str | os.PathLike) -> list[Path]:
    """Dataset subdirectories of a run (those with a problems.jsonl), in name order."""
    return sorted(p.parent for p in Path(output_dir).glob("*/problems.jsonl"))


def completion_crc(text: str) -> int:
    """Checksum tying a score row to the completion it scored (a regenerated sample gets rescored)."""
    return zlib.crc32(text.encode("utf-8"))
