"""Issue 63, class 1: a gold in exponent form is a number, never Euler's e.

math-verify reads `1e-07` as `e - 7` and `1e1` as `e`, and Python, JSON and parquet write floats that way. Every
path a gold takes (the data loaders, the training reward, the eval) must score the right answer 1 and `e - 7` 0.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from ordergrad_trl.evaluation.cli import command as main
from ordergrad_trl.tasks.data import load_math_dataset
from ordergrad_trl.tasks.numerals import number_text, positional
from ordergrad_trl.tasks.rewards import math_reward

# float gold -> its positional text (what a right answer writes)
GOLDS = {2.5e-06: "0.0000025", 3e21: "3000000000000000000000", 1e1: "10", 1e-07: "0.0000001", -4.5e-05: "-0.000045"}
FLAGS = ["--reward_workers", "1", "--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"]


def test_every_float_becomes_positional_text_of_its_shortest_digits():
    """Over many magnitudes and mantissas: no exponent letter, and the same number as Python's shortest repr."""
    for mantissa in (1.0, 2.5, 3.0, 9.87654321, 1.2345678901234567):
        for power in range(-30, 31):
            for value in (mantissa * 10.0**power, -mantissa * 10.0**power):
                text = number_text(value)
                assert "e" not in text.lower(), (value, text)
                assert Decimal(text) == Decimal(repr(value)), (value, text)


def test_exponent_numerals_in_text_are_rewritten_and_nothing_else():
    assert positional(r"\boxed{2.5e-06}") == r"\boxed{0.0000025}"
    assert positional("3E+21 and 1e1.") == "3000000000000000000000 and 10."
    for kept in ("e - 7", "2e", "x1e5", r"\mathrm{e}^{2}", "e^{-7}", "1.5.e3"):
        assert positional(kept) == kept
    huge = positional("1e999999999")  # a bounded text, not a gigabyte of zeros
    assert len(huge) < 40 and "10^{999999999}" in huge


def _rows(path: Path, golds) -> Path:
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"question": [f"Number {i}?" for i in range(len(golds))], "answer": list(golds)}),
                       path)
    else:  # each float as Python's json writes it: 2.5e-06, 3e+21, 10.0
        rows = [json.dumps({"question": f"Number {i}?", "answer": g}) for i, g in enumerate(golds)]
        path.write_text("[" + ",".join(rows) + "]" if path.suffix == ".json" else "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_the_training_loader_writes_float_golds_positionally(tmp_path, suffix):
    golds = load_math_dataset(str(_rows(tmp_path / f"golds{suffix}", GOLDS)))["answer"][:]
    assert golds == list(GOLDS.values())


def _boxed(text: str) -> str:
    return f"The answer is \\boxed{{{text}}}."


def test_the_training_reward_scores_exponent_golds_as_numbers():
    """Python float golds, their exponent-form strings (an old data file's text) and numpy floats alike."""
    import numpy as np

    for gold, text in GOLDS.items():
        for given in (gold, repr(gold), np.float64(gold)):
            right, also_right, euler = math_reward([_boxed(text), _boxed(repr(gold)), _boxed("e - 7")],
                                                   answer=[given] * 3)
            assert (right, also_right) == (1.0, 1.0), (gold, given)
            assert euler == 0.0, (gold, given)
    assert math_reward([_boxed("e - 7"), _boxed("e")], answer=[1e-07, 1e1]) == [0.0, 0.0]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_eval_scores_exponent_golds_as_numbers(tmp_path, suffix):
    """The reference backend answers each gold as problems.jsonl holds it: that text must be positional (in
    exponent form the reference's answer shares the gold's misreading, and the bug hides behind 100%)."""
    data = _rows(tmp_path / f"floats{suffix}", GOLDS)
    out = tmp_path / "run"
    main(["run", "--backend", "reference", "--datasets", str(data), "--num_samples", "1", "--output_dir", str(out),
          *FLAGS])
    report = ["report", "--output_dir", str(out), "--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"]
    problems = [json.loads(line) for line in (out / "floats" / "problems.jsonl").read_text().splitlines()]
    assert [p["answer"] for p in problems] == list(GOLDS.values())
    assert main(report)["datasets"]["floats"]["metrics"]["pass@1"]["value"] == 1.0
