"""Run directories written by hand in tests, made whole: the `provenance.json` that `generate` would have written.

Every stage checks a run against its provenance (`ordergrad_trl.evaluation.verify`), so a test that writes
`problems.jsonl` and `generations.jsonl` itself records them with `adopt(out)` before it scores or reports; adopt
also gives each generation row the tag of what made it, as `generate` does.
"""

from __future__ import annotations

import json
from pathlib import Path

from ordergrad_trl.evaluation import layout, records
from ordergrad_trl.evaluation.problems import problems_index, problems_sha256
from ordergrad_trl.evaluation.provenance import write_provenance
from ordergrad_trl.evaluation.verify import generation_tag


def _raw_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def adopt(out: str | Path, num_samples: int | None = None) -> dict:
    """Write `out/provenance.json` for the datasets found in `out` (n: `num_samples`, else the largest sample index
    + 1 per dataset); returns it."""
    out = Path(out)
    datasets = {}
    for d in layout.dataset_dirs(out):
        problems = records.read_jsonl(d / "problems.jsonl")
        gens = [r for f in d.glob(layout.GEN_GLOB) for r in _raw_rows(f)]  # untagged yet: not read as checked rows
        n = num_samples or 1 + max((r["sample"] for r in gens), default=0)
        datasets[d.name] = {"source": d.name, "split": "test", "limit": None, "local_data": False, "num_samples": n,
                            "num_problems": len(problems), "problems_sha256": problems_sha256(problems),
                            "problems_index": problems_index(problems)}
    provenance = {
        "schema": 1, "model": {"model": "reference", "base": None, "adapter": None, "fingerprint": None},
        "prompt": {"system_prompt": None, "user_template": None, "use_chat_template": True,
                   "chat_template_sha256": None},
        "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 1024},
        "datasets": datasets,
    }
    write_provenance(out, provenance)
    for d in layout.dataset_dirs(out):
        problems = {p["id"]: p for p in records.read_jsonl(d / "problems.jsonl")}
        for file in d.glob(layout.GEN_GLOB):
            rows = _raw_rows(file)
            records.write_jsonl_atomic(file, [{**r, "tag": generation_tag(provenance, problems[r["id"]])}
                                              if r.get("id") in problems else r for r in rows])
    return provenance


def cli_error(capsys, argv) -> str:
    """Run `ordergrad-eval argv` in-process; it must exit 2 with one stderr line and no traceback."""
    import pytest

    from ordergrad_trl.evaluation.cli import command

    with pytest.raises(SystemExit) as exc:
        command(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()
