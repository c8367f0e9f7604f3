"""Byte-safe run records: a run killed mid-write, at any byte (inside a UTF-8 character too), resumes to exactly
the run that was never interrupted; a complete row without its newline is kept; a corrupt line is named.

The oracle is the uninterrupted run itself: its rows and its report. Problems, golds, ids and completions carry
2-, 3- and 4-byte UTF-8 characters, so the cuts land inside characters as well as between them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ordergrad_trl.evaluation import records
from ordergrad_trl.evaluation.args import GenerateArgs, PathArgs, ReportArgs, ScoreArgs
from ordergrad_trl.evaluation.errors import UsageError
from ordergrad_trl.evaluation.generate import generate
from ordergrad_trl.evaluation.report import report
from ordergrad_trl.evaluation.score import score

PROBLEMS = [  # questions and golds in several scripts; ids with non-ASCII characters
    {"id": "é1", "problem": "Combien font 1 + 1 ? (réponse ≥ 0)", "answer": "2"},
    {"id": "π2", "problem": "π を 3 に丸めると?", "answer": "3"},
    {"id": "𝔼3", "problem": "Σ: 2 + 2 = ? 🙂", "answer": "4"},
]


@pytest.fixture
def data_file(tmp_path) -> Path:
    path = tmp_path / "data" / "unicode.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in PROBLEMS), encoding="utf-8")
    return path


def fake_score(completions, golds, **kw):
    """Stands in for math-verify (a worker pool per call is too slow for hundreds of resumes): exact match of the
    boxed answer. Both the uninterrupted and the resumed runs use it, so they must agree."""
    correct = [float(f"\\boxed{{{g}}}" in c) for c, g in zip(completions, golds)]
    return correct, ["ok"] * len(correct)


def run_all(data: Path, out: Path, num_samples: int = 2) -> dict:
    args = GenerateArgs(datasets=[str(data)], backend="reference", num_samples=num_samples)
    paths = PathArgs(str(out), disable_tqdm=True)
    generate(args, paths)
    score(ScoreArgs(reward_workers=1), paths)
    return report(ReportArgs(ks=[1, num_samples], bootstrap_samples=20, plot=False), paths)


def rows(path: Path) -> list[dict]:
    return sorted(records.read_jsonl(path), key=lambda r: (r["id"], r["sample"]))


def last_two_rows_offsets(path: Path) -> range:
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n", 0, data.rstrip(b"\n").rfind(b"\n")) + 1
    return range(start, len(data))


@pytest.mark.parametrize("stage_file", ["generations.jsonl", "scores.jsonl"])
def test_resume_after_a_cut_at_every_byte_equals_the_uninterrupted_run(data_file, tmp_path, monkeypatch,
                                                                        stage_file):
    monkeypatch.setattr("ordergrad_trl.tasks.rewards.score_completions", fake_score)
    full = tmp_path / "full"
    want = run_all(data_file, full)
    key_dir = full / "unicode"
    file = key_dir / stage_file
    data = file.read_bytes()
    offsets = last_two_rows_offsets(file)
    tail = data[offsets.start :]
    assert len(tail) > len(tail.decode("utf-8"))  # the rows cut hold multi-byte characters
    assert len(offsets) > 100
    want_gen, want_scores = rows(key_dir / "generations.jsonl"), rows(key_dir / "scores.jsonl")
    for cut in offsets:
        out = tmp_path / f"cut{cut}"
        shutil.copytree(full, out)
        (out / "report.json").unlink()
        if stage_file == "generations.jsonl":
            (out / "unicode" / "scores.jsonl").unlink()  # killed while generating: nothing scored yet
        (out / "unicode" / stage_file).write_bytes(data[:cut])
        got = run_all(data_file, out)
        assert rows(out / "unicode" / "generations.jsonl") == want_gen, cut
        assert rows(out / "unicode" / "scores.jsonl") == want_scores, cut
        assert got["datasets"] == want["datasets"], cut
        for name in ("generations.jsonl", "scores.jsonl"):  # every file ends on a complete line, no duplicate
            text = (out / "unicode" / name).read_bytes()
            assert text.endswith(b"\n") and len(text.splitlines()) == len(want_gen), (cut, name)
        shutil.rmtree(out)


def test_a_complete_last_row_without_newline_is_kept(data_file, tmp_path, monkeypatch):
    """A hand-edited file whose last row lacks the newline: counted as done, and not cut off (no sample lost)."""
    monkeypatch.setattr("ordergrad_trl.tasks.rewards.score_completions", fake_score)
    out = tmp_path / "run"
    run_all(data_file, out)
    gen = out / "unicode" / "generations.jsonl"
    gen.write_bytes(gen.read_bytes().rstrip(b"\n"))
    before = rows(gen)
    got = run_all(data_file, out, num_samples=4)  # more samples: appends after the unterminated row
    keys = [(r["id"], r["sample"]) for r in rows(gen)]
    assert len(keys) == len(set(keys)) == 12 and all(r in rows(gen) for r in before)
    assert got["datasets"]["unicode"]["num_samples"] == 4 and got["datasets"]["unicode"]["missing_samples"] == 0


def test_repair_tail_keeps_complete_rows_and_cuts_partial_ones(tmp_path):
    path = tmp_path / "f.jsonl"
    row = '{"id": "ä", "sample": 0}'
    for content, want in [(row, row + "\n"), (row + "\n" + row[:-3], row + "\n"), ("", ""), (row[:5], ""),
                          (row + "\n", row + "\n")]:
        path.write_bytes(content.encode())
        records.repair_tail(path)
        assert path.read_bytes() == want.encode(), content
    cut = row.encode().index("ä".encode()) + 1  # inside the 2-byte 'ä'
    path.write_bytes((row + "\n").encode() + row.encode()[:cut])
    assert records.read_jsonl(path) == [json.loads(row)]
    records.repair_tail(path)
    assert path.read_bytes() == (row + "\n").encode()


def test_a_corrupt_line_before_the_last_is_named(tmp_path):
    path = tmp_path / "generations.jsonl"
    path.write_bytes(b'{"id": "a", "sample": 0}\n{"id": "a", "sam\n{"id": "a", "sample": 1}\n')
    with pytest.raises(UsageError, match=rf"{path}:2: not a UTF-8 JSON object"):
        records.read_jsonl(path)
    path.write_bytes(b'{"id": "a", "sample": 0}\n\xff\xfe\n{"id": "a", "sample": 1}\n')
    with pytest.raises(UsageError, match=rf"{path}:2:"):
        records.read_jsonl(path)


def test_each_row_is_one_write(tmp_path, monkeypatch):
    """A kill between two writes leaves whole rows: one `os.write` per row, never one row split over two."""
    import os

    writes = []
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(bytes(data)) or real(fd, data))
    rows_in = [{"id": "x", "sample": s, "completion": "∑" * s} for s in range(3)]
    records.append_jsonl(tmp_path / "g.jsonl", rows_in)
    written = [json.loads(w) for w in writes]
    assert [{k: v for k, v in r.items() if k != "check"} for r in written] == rows_in
    assert [r["check"] for r in written] == [records.row_check(r) for r in rows_in]  # every row stamped
    assert all(w.endswith(b"\n") for w in writes)
