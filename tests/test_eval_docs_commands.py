"""Every eval command printed in README.md and docs/ runs as written: `ordergrad-eval` from outside the repo.

`ordergrad-eval ...` (and the benchmark script) run from a temporary directory, through the installed console
script; `python -m eval.<stage> ...`, the checkout's form, runs from the repository root with its `--output_dir`
moved to a temporary directory. The commands are parsed from the files' ```bash blocks, so they cannot drift from
what users read. Only sizes change: `--model X` becomes `--backend reference` (no weights offline), `--limit 2`,
`--num_samples 16`, `--ks 1 4 16`; benchmarks load from the local copies (ORDERGRAD_LOCAL_DATA=1). Each report is
then checked against brute force on its own scores.jsonl: the Codex closed form for pass@k / pass^k and subset
enumeration for maj@k.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ORDERGRAD_SHARED_DATA", REPO / ".." / "shared" / "data"))
EVAL_ENTRY = re.compile(r"^(ordergrad-eval (run|generate|score|report|compare)\b|"
                        r"python (-m eval\.(run|generate|score|report)\b|benchmarks/eval_throughput\.py\b))")

from helpers.docs_commands import commands_in, doc_files  # noqa: E402
from test_eval_metrics import brute_maj  # noqa: E402
from helpers import bounded  # noqa: E402


def documented() -> list:
    """The eval commands of every doc's bash blocks (tests/helpers/docs_commands.py), in reading order."""
    return [c for doc in doc_files() for c in commands_in(doc) if not c.inline and EVAL_ENTRY.match(" ".join(c.argv))]


def documented_commands(doc: str) -> list[str]:
    """The eval commands of one file, as shell text (environment assignments first)."""
    return [c.text for c in documented() if c.doc == doc]


DOCS = sorted({c.doc for c in documented()})


def stage_of(argv: list[str]) -> str:
    """'run' of `ordergrad-eval run ...` and of `python -m eval.run ...`."""
    return argv[1] if argv[0] == "ordergrad-eval" else argv[2].removeprefix("eval.")


def console_script() -> str:
    found = shutil.which("ordergrad-eval", path=str(Path(sys.executable).parent)) or shutil.which("ordergrad-eval")
    if found is None:
        pytest.skip("the ordergrad-eval console script is not installed in this environment (pip install -e .)")
    return found


def shrink(command: str) -> tuple[dict, list[str]]:
    """(environment assignments, argv) with the model swapped for the reference backend and sizes shrunk."""
    words = shlex.split(command)
    env = {}
    while re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    argv, i = [], 0
    flags = {}
    while i < len(words):
        w = words[i]
        values = []
        while i + 1 + len(values) < len(words) and not words[i + 1 + len(values)].startswith("--"):
            values.append(words[i + 1 + len(values)])
        if w.startswith("--"):
            flags[w] = values
            i += 1 + len(values)
        else:
            argv.append(w)
            i += 1
    benchmark = argv[1].startswith("benchmarks/")
    stage = "" if benchmark else stage_of(argv)
    if benchmark:
        flags["--model"] = ["tiny"]
    elif stage in ("run", "generate") and "--config" not in flags:  # no --model: the default model
        flags.pop("--model", None)
        flags["--backend"] = ["reference"]
    if stage in ("run", "generate") or benchmark:
        flags["--limit"] = ["2"]
        flags["--num_samples"] = ["4" if benchmark else "16"]
    if benchmark:
        flags.update({"--max_new_tokens": ["4"], "--score_items": ["40"], "--batch_size": ["8"]})
        flags.pop("--local_data", None)
    if "--ks" in flags:
        flags["--ks"] = ["1", "4", "16"]
    for flag, values in flags.items():
        argv += [flag, *values]
    return env, argv


def test_docs_list_the_eval_commands():
    """The parser finds what a reader sees: the one-shot, stage-by-stage, multi-GPU and YAML forms."""
    readme, evaluation = documented_commands("README.md"), documented_commands("docs/evaluation.md")
    assert any(c.startswith("ordergrad-eval run") for c in readme)
    assert [c.split()[1] for c in evaluation if c.startswith("ordergrad-eval")][:5] == [
        "run", "generate", "score", "report", "run"]
    assert any(c.startswith("CUDA_VISIBLE_DEVICES=4,5,6,7 ordergrad-eval run") for c in evaluation)
    assert any(c.startswith("ordergrad-eval run --config my_eval.yaml") for c in evaluation)
    assert any(c.startswith("ordergrad-eval compare") for c in evaluation)  # compare and a named protocol, run
    assert any("--protocol deepseek_r1" in c for c in evaluation)
    assert any(c.startswith("python -m eval.run") for c in evaluation)  # the checkout's form is shown, and run
    for doc in doc_files():  # commands users copy must not depend on the repository root
        assert not re.search(r"^\s*(\S+=\S+ )*python eval/", (REPO / doc).read_text(), flags=re.M), doc


def check_report(run_dir: Path) -> None:
    report = json.loads((run_dir / "report.json").read_text())
    assert report["datasets"]
    for name, ds in report["datasets"].items():
        scores = [json.loads(line) for line in (run_dir / name / "scores.jsonl").read_text().splitlines()]
        by_problem: dict[str, list] = {}
        for row in sorted(scores, key=lambda r: r["sample"]):
            by_problem.setdefault(row["id"], []).append(row)
        rows = [r for r in by_problem.values() if r[0]["correct"] is not None]
        n = ds["num_samples"]
        assert all(len(r) == n for r in rows)
        for k in ds["ks"]:
            want_pass, want_hat, want_maj = [], [], []
            for r in rows:
                c = sum(x["correct"] for x in r)
                want_pass.append(1 - math.comb(n - int(c), k) / math.comb(n, k))
                want_hat.append(math.comb(int(c), k) / math.comb(n, k))
                ids: dict = {}
                lab = [ids.setdefault("gold" if x["correct"] else x["pred"], len(ids))
                       if x["correct"] or x["pred"] is not None else -1 for x in r]
                want_maj.append(brute_maj(lab, [x["correct"] for x in r], k))
            m = ds["metrics"]
            assert m[f"pass@{k}"]["value"] == pytest.approx(sum(want_pass) / len(rows), abs=1e-12), (name, k)
            assert m[f"pass^{k}"]["value"] == pytest.approx(sum(want_hat) / len(rows), abs=1e-12), (name, k)
            assert m[f"maj@{k}"]["value"] == pytest.approx(sum(want_maj) / len(rows), abs=1e-12), (name, k)


# docs/evaluation.md runs every stage of several runs: 81 s on a 2-core CPU (the others: about 10 s)
@pytest.mark.parametrize(
    "doc", [pytest.param(d, marks=pytest.mark.slow) if d == "docs/evaluation.md" else d for d in DOCS])
def test_every_documented_eval_command_runs_outside_the_repo(doc, tmp_path):
    if not (SHARED / "gsm8k_test.jsonl").is_file():
        pytest.skip(f"public benchmark files not found in {SHARED} (set ORDERGRAD_SHARED_DATA)")
    cwd = tmp_path / "elsewhere"  # not the repo root: the console script comes from the installed package
    cwd.mkdir()
    (cwd / "my_eval.yaml").write_text("backend: reference\ndatasets: [gsm8k]\nlimit: 2\nnum_samples: 16\n"
                                      "ks: [1, 4, 16]\noutput_dir: runs/yaml\n")
    commands = documented_commands(doc)
    assert commands, f"no eval command found in {doc}"
    env = dict(os.environ, HF_HUB_OFFLINE="1", ORDERGRAD_LOCAL_DATA="1", ORDERGRAD_SHARED_DATA=str(SHARED),
               OMP_NUM_THREADS="1", ORDERGRAD_REWARD_WORKERS="1")
    env.pop("PYTHONPATH", None)
    for command in commands:
        extra, argv = shrink(command)
        stage = "" if argv[1].startswith("benchmarks/") else stage_of(argv)
        where = cwd
        if argv[0] == "ordergrad-eval":
            argv = [console_script(), *argv[1:]]
        elif argv[1].startswith("benchmarks/"):
            argv = [sys.executable, str(REPO / argv[1]), *argv[2:]]  # a script path, relative to the repo root
        else:  # python -m eval.<stage>: the checkout's entry points, from the repository root
            assert "--output_dir" in argv and "--config" not in argv, f"{command}: pass --output_dir, no --config"
            at = argv.index("--output_dir") + 1
            argv[at] = str(cwd / Path(argv[at]).name)
            argv, where = [sys.executable, *argv[1:]], REPO
        proc = bounded.run(argv, cwd=where, env={**env, **extra}, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{command}\n-> {argv}\n{proc.stderr[-3000:]}"
        if stage in ("run", "report"):
            out = argv[argv.index("--output_dir") + 1] if "--output_dir" in argv else "runs/yaml"
            check_report(where / out)
