"""studies/signal_check.py: the committed predicted-against-logged shares are what the committed units and the
calibration give today (compared as printed, and within a stated tolerance), and the prediction is the planner's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import signal_check  # noqa: E402
from helpers.committed_numbers import same_numbers  # noqa: E402


def documented():
    """`python studies/signal_check.py` where docs show it (tests/test_docs_commands.py delegates it here: the test
    below rebuilds what it writes)."""
    from helpers.docs_commands import commands_in, doc_files

    return [c for doc in doc_files() for c in commands_in(doc) if c.argv == ("python", "studies/signal_check.py")]


def test_the_committed_report_is_what_the_units_give():
    committed = json.loads(signal_check.OUT_JSON.read_text())
    fresh = json.loads(json.dumps(signal_check.build()))
    same_numbers(fresh, committed)
    assert signal_check.render(fresh) in signal_check.OUT_MD.read_text()


def test_the_count_based_share_is_the_fraction_of_problems_whose_count_carries():
    """Max@8 at N = 16 carries a gradient exactly for 1 <= c <= 8 (c > N - K: the contrast is 0)."""
    counts = json.loads(signal_check.CALIBRATION.read_text())["base_success_histogram"]
    got = signal_check.predict(["--ordergrad_objective", "ReMax", "--ordergrad_k", "8"], counts)
    assert got["counts_with_gradient"] == list(range(1, 9))
    assert got["from_counts"] == pytest.approx(sum(counts[1:9]) / sum(counts), abs=1e-15)
