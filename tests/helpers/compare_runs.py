"""Scored run directories written from known correctness, for `ordergrad-eval compare` tests: no model, no grader.

`scored_run(out, correct)` writes problems, one generation per sample and its score row (`correct` per problem,
a list of 0/1 per sample), records the provenance `generate` would have (`eval_runs.adopt`), then applies the
protocol changes asked (sampling, prompt, grader, n), re-tagging the generations as generate would have.
"""

from __future__ import annotations

from pathlib import Path

from helpers.eval_runs import adopt

from ordergrad_trl.evaluation import layout, records
from ordergrad_trl.evaluation.provenance import read_provenance, write_provenance
from ordergrad_trl.evaluation.verify import generation_tag

GRADER = {"name": "math-verify", "versions": ["0.9.0"], "reward_timeout_s": [10.0]}


def scored_run(out: Path, correct: dict[str, list[int]], dataset: str = "toy", sampling: dict | None = None,
               prompt: dict | None = None, grader: dict | None = GRADER, seeds=(0,), protocol: str | None = None,
               golds: dict[str, str] | None = None) -> Path:
    d = Path(out) / dataset
    d.mkdir(parents=True)
    golds = golds or {pid: "7" for pid in correct}
    records.write_jsonl_atomic(d / "problems.jsonl", [
        {"id": pid, "answer": golds[pid], "question": f"question {pid}", "prompt": [{"role": "user", "content": pid}]}
        for pid in correct])
    texts = {(pid, s): (f"\\boxed{{{golds[pid]}}}" if c else f"\\boxed{{wrong {s}}}")
             for pid, cs in correct.items() for s, c in enumerate(cs)}
    records.append_jsonl(d / "generations.jsonl", [
        {"id": pid, "sample": s, "completion": t, "num_tokens": 5, "finish_reason": "stop"}
        for (pid, s), t in texts.items()])
    provenance = adopt(out)
    provenance = {k: v for k, v in read_provenance(Path(out)).items() if k != "check"}
    provenance["sampling"].update(sampling or {})
    provenance["prompt"].update(prompt or {})
    provenance["draws"] = {"protocol": protocol, "overrides": {}, "seeds": list(seeds)}
    if grader is not None:
        provenance["grader"] = grader
    write_provenance(Path(out), provenance)
    problems = {p["id"]: p for p in records.read_jsonl(d / "problems.jsonl")}
    for file in layout.generation_files(d):
        rows = records.read_jsonl(file)
        records.write_jsonl_atomic(file, [{**{k: v for k, v in r.items() if k not in ("check", "tag")},
                                           "tag": generation_tag(provenance, problems[r["id"]])} for r in rows])
    records.append_jsonl(d / "scores.jsonl", [
        {"id": pid, "sample": s, "correct": float(correct[pid][s]), "status": "ok", "format": 1.0,
         "pred": golds[pid] if correct[pid][s] else f"wrong {s}", "crc": records.completion_crc(t)}
        for (pid, s), t in texts.items()])
    return Path(out)
