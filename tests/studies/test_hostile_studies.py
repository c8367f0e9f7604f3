"""Issue 63, studies/: a malformed unit record is one line naming its file, a recorded arm's flags are checked as
`--arm` flags are, and a unit is named once.

Before, each malformed record failed deep in a summary (`KeyError: 'unit'`, `TypeError: list indices`, a bare
JSONDecodeError, `IsADirectoryError`); a record under another unit's file name replaced that unit or was counted
under both names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import compare_summary  # noqa: E402
from unit_records import load_units  # noqa: E402
from helpers import bounded  # noqa: E402

DRIVER = REPO / "studies" / "compare_objectives.py"


def _unit(name: str, n: int = 4) -> dict:
    arm, _, seed = name.partition("-s")
    return {"schema": 1, "unit": name, "arm": arm, "seed": int(seed) if seed else None, "num_samples": n,
            "config": {}, "train_overrides": [], "train_log": [], "wall_s": 1.0,
            "eval": {"problem_ids": ["p0", "p1"], "correct": [1, 2], "scored": [n, n]}}


def _folder(tmp_path: Path, **records) -> Path:
    assets = tmp_path / "units"
    assets.mkdir()
    for name, record in {"rloo-s0": _unit("rloo-s0"), **records}.items():
        (assets / f"{name}.json").write_text(record if isinstance(record, str) else json.dumps(record))
    return assets


MALFORMED = {
    "a list": ([_unit("max8-s0")], "a JSON object, got a JSON list"),
    "cut short": (json.dumps(_unit("max8-s0"))[:40], "not valid JSON"),
    "no eval": ({k: v for k, v in _unit("max8-s0").items() if k != "eval"}, "field 'eval'"),
    "no unit": ({k: v for k, v in _unit("max8-s0").items() if k != "unit"}, "field 'unit'"),
    "a string seed": ({**_unit("max8-s0"), "seed": "0"}, "field 'seed' must be the integer 0"),
    "another seed": ({**_unit("max8-s0"), "seed": 1}, "field 'seed'"),
    "a string count": ({**_unit("max8-s0"), "num_samples": "4"}, "field 'num_samples'"),
    "flags not a list": ({**_unit("max8-s0"), "train_flags": "--ordergrad_k 8"}, "field 'train_flags'"),
    "another unit's name": (_unit("rloo-s0"), "field 'unit' is 'rloo-s0' but the file is named max8-s0.json"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_unit_record_is_named_by_its_file(tmp_path, case):
    record, needle = MALFORMED[case]
    assets = _folder(tmp_path, **{"max8-s0": record})
    with pytest.raises(ValueError) as err:
        compare_summary.load_units(assets)
    assert str(assets / "max8-s0.json") in str(err.value) and needle in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_a_folder_where_a_record_belongs_is_named(tmp_path):
    assets = _folder(tmp_path)
    (assets / "max8-s0.json").mkdir()
    with pytest.raises(ValueError, match="max8-s0.json: not a file .*it is a folder"):
        load_units(assets)


def test_well_formed_records_load_by_name(tmp_path):
    assets = _folder(tmp_path, base=_unit("base"), **{"max8-s1": _unit("max8-s1")})
    assert list(load_units(assets)) == ["base", "max8-s1", "rloo-s0"]


def _driver(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    """The driver as a user runs it; a model that does not exist, so that a unit it should not have started fails
    in seconds instead of training."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return bounded.run([sys.executable, str(DRIVER), *argv, "--model_name_or_path", str(tmp_path / "no-model")],
                       env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)


def test_the_driver_refuses_a_malformed_record_in_one_line(tmp_path):
    assets = _folder(tmp_path, **{"max8-s0": {**_unit("max8-s0"), "seed": "0"}})
    proc = _driver(tmp_path, "--summarize", "--assets_dir", str(assets))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "max8-s0.json: field 'seed'" in proc.stderr.strip().splitlines()[-1]


def test_recorded_train_flags_are_checked_as_arm_flags_are(tmp_path):
    """A record's `train_flags` are read back as the arm's command: a flag an arm cannot set, or a plan that cannot
    train, is refused naming the file, as `--arm` refuses it; two units of one arm with other flags too."""
    import compare_objectives

    bad = {**_unit("mine-s0"), "train_flags": ["--learning_rate", "1"]}
    assets = _folder(tmp_path, **{"mine-s0": bad})
    with pytest.raises(ValueError, match=r"mine-s0.json: train_flags of arm 'mine': an arm cannot set --learning_rate"):
        compare_objectives.recorded_arms(assets, 16)
    (assets / "mine-s0.json").write_text(json.dumps({**bad, "train_flags": ["--ordergrad_k", "16"]}))
    with pytest.raises(ValueError, match=r"mine-s0.json: .*ordergrad_k \(16\) must be smaller"):
        compare_objectives.recorded_arms(assets, 16)
    good = ["--ordergrad_objective", "ReMax", "--ordergrad_k", "4"]
    (assets / "mine-s0.json").write_text(json.dumps({**bad, "train_flags": good}))
    (assets / "mine-s1.json").write_text(json.dumps({**_unit("mine-s1"), "train_flags": [*good[:3], "2"]}))
    with pytest.raises(ValueError, match=r"mine-s1.json: train_flags .* differ from those of arm 'mine' in mine-s0"):
        compare_objectives.recorded_arms(assets, 16)
    (assets / "mine-s1.json").unlink()
    assert compare_objectives.recorded_arms(assets, 16) == {"mine": good}
    (assets / "mine-s0.json").write_text(json.dumps(bad))  # the driver stops before any unit runs
    proc = _driver(tmp_path, "--units", "mine-s1", "--assets_dir", str(assets), "--work_dir", str(tmp_path / "w"))
    assert proc.returncode == 2 and "mine-s0.json: train_flags" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("units", [["rloo-s0", "rloo-s0"], ["base", "max8-s0", "base"]])
def test_a_unit_named_twice_is_refused(tmp_path, units):
    """Issue 63: `--units x x` ran x twice at once, two jobs writing one work folder."""
    proc = _driver(tmp_path, "--units", *units, "--assets_dir", str(tmp_path / "a"), "--work_dir", str(tmp_path / "w"))
    assert proc.returncode == 2 and "more than once" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "w").exists()
