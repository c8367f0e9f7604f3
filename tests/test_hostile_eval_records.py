"""Issue 63, the eval: a report is written when no gold parses, a corrupt record is named by its file, and a `--seed`
that draws nothing is named in a warning (and not recorded as a seed the samples were drawn with)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ordergrad_trl.evaluation.cli import command as main

FLAGS = ["--reward_workers", "1", "--bootstrap_samples", "20", "--disable_tqdm"]


def _run(out: Path, data: Path | str = "arithmetic", *extra: str) -> dict:
    return main(["run", "--backend", "reference", "--datasets", str(data), "--limit", "3", "--num_samples", "2",
                 "--output_dir", str(out), *FLAGS, *extra])


def test_a_report_is_written_when_no_gold_parses(tmp_path):
    """Issue 63: every problem left out (golds that parse to nothing) made the plot's log axis fail, and no report
    was written. Now the report is written, without a plot, and says why."""
    pytest.importorskip("matplotlib")
    data = tmp_path / "nogold.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1?", "answer": "\\text{}"}) + "\n" for i in range(3)))
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="no plot written"):
        result = _run(out, data, "--plot", "true")
    assert (out / "report.md").is_file() and (out / "report.json").is_file() and not (out / "passk.png").exists()
    assert "3 with an unparseable gold (left out)" in (out / "report.md").read_text()
    assert "plot" not in result


def test_a_seed_that_draws_nothing_is_named_and_not_recorded(tmp_path, caplog):
    """Issue 63: a rerun with --seed 7 whose samples all exist drew nothing with it, said nothing, and recorded seed
    7 beside 0 in the protocol header."""
    out = tmp_path / "run"
    _run(out, "arithmetic", "--plot", "false")
    with caplog.at_level(logging.WARNING, logger="ordergrad_trl.evaluation.plan"):
        _run(out, "arithmetic", "--plot", "false", "--seed", "7")
    assert any("--seed 7 is unused" in r.getMessage() for r in caplog.records), caplog.text
    assert json.loads((out / "provenance.json").read_text())["draws"]["seeds"] == [0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ordergrad_trl.evaluation.plan"):
        main(["run", "--backend", "reference", "--datasets", "arithmetic", "--limit", "3", "--num_samples", "3",
              "--output_dir", str(out), *FLAGS, "--plot", "false", "--seed", "7"])  # draws sample 2 with seed 7
    assert not any("unused" in r.getMessage() for r in caplog.records)
    assert json.loads((out / "provenance.json").read_text())["draws"]["seeds"] == [0, 7]


def test_a_cut_short_merge_marker_is_merged_again(tmp_path):
    """The merged adapter's marker, cut short by a crash mid-write, was a bare JSONDecodeError: now it is stale."""
    from ordergrad_trl.evaluation.modeling import _read_marker

    marker = tmp_path / "ordergrad_merged_from.json"
    marker.write_text('{"model": "x", "dty')
    assert _read_marker(marker) is None


def test_a_corrupt_legacy_config_is_named(tmp_path):
    from ordergrad_trl.evaluation.errors import UsageError
    from ordergrad_trl.evaluation.report import _legacy_config

    legacy = tmp_path / "config.json"
    legacy.write_text('{"model": ')
    with pytest.raises(UsageError, match=f"{legacy}: not valid JSON"):
        _legacy_config(legacy)
