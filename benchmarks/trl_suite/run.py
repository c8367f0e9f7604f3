"""TRL's own GRPO trainer tests, run against stock GRPOTrainer and against OrderGradTrainer, compared per test.

    git clone --branch v1.16.0 https://github.com/huggingface/trl ../trl   # TRL's tests: a TRL source checkout
    python benchmarks/trl_suite/run.py --trl-dir ../trl             # both runs + comparison (~1 h on 2 busy cores)
    python benchmarks/trl_suite/run.py --trainer ordergrad         # one run, TRL checkout in ../shared/trl
    python benchmarks/trl_suite/run.py -k "loss_types or scale_rewards" --output /tmp/trl_suite

The tests are read from the TRL checkout (`--trl-dir`, default `../shared/trl` beside the repository when it
exists): its `tests/test_grpo_trainer.py` with TRL's own `tests/conftest.py`. Nothing of TRL is copied here;
`plugin.py` (ours) substitutes the trainer and serves offline stand-ins for the Hub models and datasets
(`stand_ins.py`). Each run is `pytest` in a subprocess, in the checkout, with ORDERGRAD_TRL_SUITE_TRAINER=
grpo|ordergrad and a JUnit report; the comparison puts every test in one class:

- passed: passes with OrderGrad (and with GRPO);
- skipped (GPU/vLLM/optional packages): skipped in both runs, with the skip reason;
- fails with stock GRPO too: API drift between the checkout's tests (../shared/trl: TRL main) and TRL 1.16, or a
  Hub model/dataset without an offline stand-in; not OrderGrad's doing;
- by design: fails with OrderGrad only, with the error listed in `BY_DESIGN` (reason and what to set instead);
- regression: fails with OrderGrad only, for any other reason (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_TRL_DIR = REPO.parent / "shared" / "trl"  # a TRL checkout (tests/, pyproject.toml) shared beside the repo
TEST_FILE = Path("tests") / "test_grpo_trainer.py"  # in the TRL checkout
CLONE = "git clone --branch v1.16.0 https://github.com/huggingface/trl"

# Tests that fail with OrderGrad by design: test name pattern -> (regex the failure must match, why, what to set).
BY_DESIGN = {
    r"test_train_normalize_then_sum_aggregation|test_reward_metric_reflects_reward_weights\[normalize_then_sum\]": (
        r"multi_objective_aggregation='normalize_then_sum' is not supported by OrderGrad",
        "z-scoring each reward function within its group makes a rollout's reward depend on its group mates, so "
        "the order statistic of the rewards has no unbiased estimate",
        "multi_objective_aggregation='sum_then_normalize' (the default), with reward_weights for the scales",
    ),
}


def trl_checkout(path: str | None) -> Path:
    """The TRL source checkout whose tests run: `--trl-dir`, else `../shared/trl` beside the repository."""
    trl_dir = Path(path).expanduser().resolve() if path else DEFAULT_TRL_DIR
    if not (trl_dir / TEST_FILE).is_file():
        where = f"--trl-dir {path}" if path else f"no --trl-dir given and the default {DEFAULT_TRL_DIR}"
        raise SystemExit(f"{where}: no {TEST_FILE} there. Pass --trl-dir DIR, a TRL source checkout: {CLONE}")
    return trl_dir


def run_pytest(trainer: str, trl_dir: Path, out_dir: Path, extra: list[str], timeout: float) -> Path:
    junit = out_dir / f"{trainer}.xml"
    # the plugin is imported from this repository; the tests as the package `tests` of the TRL checkout (the cwd)
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, ORDERGRAD_TRL_SUITE_TRAINER=trainer, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               PYTHONPATH=pythonpath, PYTHONDONTWRITEBYTECODE="1")  # fmt: skip
    cmd = [sys.executable, "-m", "pytest", str(TEST_FILE), "-q", "-p", "no:cacheprovider", "-p",
           "benchmarks.trl_suite.plugin", "-o", "addopts=", f"--junitxml={junit}", "-W", "ignore::DeprecationWarning",
           *extra]  # fmt: skip
    print(f"[{time.strftime('%H:%M:%S')}] {trainer}: {' '.join(cmd)} (in {trl_dir})", flush=True)
    with open(out_dir / f"{trainer}.log", "w") as log:
        subprocess.run(cmd, cwd=trl_dir, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    print(f"[{time.strftime('%H:%M:%S')}] {trainer}: done, log {out_dir / f'{trainer}.log'}", flush=True)
    if not junit.is_file():  # pytest stopped before running tests (e.g. a collection or plugin error)
        tail = (out_dir / f"{trainer}.log").read_text().splitlines()[-20:]
        raise SystemExit(f"{trainer}: pytest wrote no JUnit report; the end of its log:\n" + "\n".join(tail))
    return junit


def read_junit(path: Path) -> dict[str, dict]:
    """test id -> {"outcome": passed|failed|skipped|xfailed, "message": ...}."""
    results = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped":
                xfail = child.get("type") == "pytest.xfail"
                outcome, message = ("xfailed" if xfail else "skipped"), child.get("message") or ""
        results[name] = {"outcome": outcome, "message": message.strip()}
    return results


def by_design(name: str, message: str):
    for pattern, (error, why, instead) in BY_DESIGN.items():
        if re.search(pattern, name) and re.search(error, message):
            return why, instead
    return None


def compare(grpo: dict[str, dict], ordergrad: dict[str, dict]) -> dict:
    classes: dict[str, list] = {k: [] for k in ("passed", "skipped", "xfailed", "fails_with_grpo_too", "by_design",
                                                 "regression", "only_ordergrad_passes")}  # fmt: skip
    for name in sorted(set(grpo) | set(ordergrad)):
        g, o = grpo.get(name, {"outcome": "missing"}), ordergrad.get(name, {"outcome": "missing"})
        if o["outcome"] == "passed":
            classes["passed" if g["outcome"] == "passed" else "only_ordergrad_passes"].append(name)
        elif o["outcome"] in ("skipped", "xfailed"):
            classes[o["outcome"]].append((name, o["message"].splitlines()[0][:120] if o["message"] else ""))
        elif g["outcome"] != "passed":
            classes["fails_with_grpo_too"].append((name, _first_error(g.get("message", ""))))
        elif (reason := by_design(name, o["message"])) is not None:
            classes["by_design"].append((name, *reason))
        else:
            classes["regression"].append((name, _first_error(o["message"])))
    return classes


def _first_error(message: str) -> str:
    lines = [line for line in message.splitlines() if line.startswith("E ")] or message.splitlines() or [""]
    return lines[0][:200]


def report(classes: dict) -> str:
    lines = ["| class | tests |", "|---|---|"]
    lines += [f"| {name} | {len(items)} |" for name, items in classes.items()]
    skip_reasons = Counter(reason for _, reason in classes["skipped"])
    if skip_reasons:
        lines += ["", "Skip reasons: " + "; ".join(f"{r} ({n})" for r, n in skip_reasons.most_common())]
    for key in ("by_design", "regression", "fails_with_grpo_too", "only_ordergrad_passes"):
        if classes[key]:
            items = [item if isinstance(item, str) else " | ".join(item) for item in classes[key]]
            lines += ["", f"{key}:"] + [f"  {item}" for item in items]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trl-dir", help=f"TRL source checkout with tests/ (default: {DEFAULT_TRL_DIR}); {CLONE}")
    parser.add_argument("--trainer", choices=["both", "grpo", "ordergrad"], default="both")
    parser.add_argument("--output", default="outputs/trl_suite", help="directory for logs, JUnit files, summary")
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per pytest run")
    parser.add_argument("--compare-only", action="store_true", help="compare the JUnit files already in --output")
    args, extra = parser.parse_known_args(argv)
    out_dir = Path(args.output).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)

    trainers = ["grpo", "ordergrad"] if args.trainer == "both" else [args.trainer]
    if not args.compare_only:
        trl_dir = trl_checkout(args.trl_dir)
        for trainer in trainers:
            run_pytest(trainer, trl_dir, out_dir, extra, args.timeout)
    results = {t: read_junit(out_dir / f"{t}.xml") for t in trainers if (out_dir / f"{t}.xml").exists()}
    if len(results) < 2:
        for trainer, res in results.items():
            print(trainer, dict(Counter(r["outcome"] for r in res.values())))
        return 0
    classes = compare(results["grpo"], results["ordergrad"])
    (out_dir / "summary.json").write_text(json.dumps(classes, indent=2))
    print(report(classes))
    return 1 if classes["regression"] else 0


if __name__ == "__main__":
    sys.exit(main())
