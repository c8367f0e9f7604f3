"""studies/objective_frontier.py's `digits20` panel, built from the pre-registered crossover's units: withheld until
all 80 are in; then its own report with Max@2 subtracted (against math.comb and scipy's t) and its own table in the
guide."""

import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import objective_frontier  # noqa: E402
from test_objective_frontier import N, _passes, _t, _unit, assets  # noqa: E402, F401 (assets: the digits units)


def _crossover_units(folder: Path, skip: str | None = None) -> dict:
    """The pre-registered crossover's 80 units (4 arms x seeds 40-59) on 12 problems, all at one commit."""
    import compare_crossover

    gen, counts, p = torch.Generator().manual_seed(5), {}, 12
    folder.mkdir(parents=True)
    for s in compare_crossover.SEEDS:
        for i, arm in enumerate(compare_crossover.ARMS):
            name = f"{arm}-s{s}"
            if name != skip:
                counts[name] = torch.randint(0, 10 + 2 * i, (p,), generator=gen).tolist()
                unit = _unit(name, counts[name], "d" * 40)
                unit["eval"].update(problem_ids=[f"q{j}" for j in range(p)], scored=[N] * p)
                (folder / f"{name}.json").write_text(json.dumps(unit))
    return counts


def test_the_digits20_panel_is_withheld_until_the_crossover_is_complete(assets, capsys):
    path, _ = assets
    _crossover_units(path / "compare_crossover", skip="curverl-s59")
    reports = objective_frontier.write(path)
    assert list(reports) == ["digits"] and not list(path.glob("objective_frontier_digits20*"))
    assert "withheld until the pre-registered crossover is complete (79 of 80 units in" in capsys.readouterr().out


def test_the_complete_crossover_is_its_own_panel_with_max2_subtracted(assets):
    path, _ = assets
    counts = _crossover_units(path / "compare_crossover")
    reports = objective_frontier.write(path)
    digits, r = reports["digits"], reports["digits20"]
    assert digits["task"] == "digits" and digits["reference"] == "rloo" and digits["units"] == 21  # unchanged
    assert r["task"] == "digits20" and r["reference"] == "max2" and r["units"] == 80
    assert sorted(s["arm"] for s in r["sets"].values()) == ["curverl", "max2", "max8", "maxrl"]
    seeds = list(range(40, 60))
    for arm, minus, k in (("max8", "max2", 8), ("curverl", "maxrl", 16), ("maxrl", "max8", 1)):
        e = next(e for e in r["differences"] if r["sets"][e["set"]]["arm"] == arm and r["sets"][e["minus"]]["arm"] == minus)
        per_seed = [_passes(counts[f"{arm}-s{s}"], k)["pass@k"] - _passes(counts[f"{minus}-s{s}"], k)["pass@k"]
                    for s in seeds]  # fmt: skip
        m, ci, p = _t(per_seed)
        assert e["seeds"] == seeds and e["commits"] == "same"
        assert e["pass@k"]["mean"][k - 1] == pytest.approx(m, abs=1e-12)
        assert e["pass@k"]["ci"][k - 1] == pytest.approx(ci, abs=1e-9) and e["pass@k"]["p"][k - 1] == pytest.approx(p)
    md = (path / "objective_frontier_digits20.md").read_text()
    assert "one task (`digits20`)" in md and "compared with `max2`" in md
    assert json.loads((path / "objective_frontier_digits20.json").read_text())["reference"] == "max2"


def test_the_guide_gets_the_digits20_table_between_its_own_markers(assets):
    """Each arm minus Max@2, then the other pairs (MaxRL - Max@8, CurveRL - Max@8, CurveRL - MaxRL), quoted as
    computed here; the `digits` table's markers are left alone."""
    path, _ = assets
    counts = _crossover_units(path / "compare_crossover")
    r = objective_frontier.frontier(path, (objective_frontier.CROSSOVER,), "digits20")
    guide = path / "guide.md"
    start, end = objective_frontier.guide_markers("digits20")
    digits = "\n".join(objective_frontier.GUIDE_MARKERS)
    guide.write_text(f"intro\n{digits}\n{start}\nstale\n{end}\nafter\n")
    assert objective_frontier.update_guide(r, guide)
    text = guide.read_text()
    assert text.startswith(f"intro\n{digits}\n{start}\n| arm") and text.endswith(f"{end}\nafter\n") and "stale" not in text
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| `")]
    assert [(row[0].split()[1], row[1]) for row in rows] == [
        ("`max8`", "`max2`"), ("`maxrl`", "`max2`"), ("`curverl`", "`max2`"),
        ("`maxrl`", "`max8`"), ("`curverl`", "`max8`"), ("`curverl`", "`maxrl`")]  # fmt: skip
    assert all(row[2] == "40-59 (20)" for row in rows)
    per_seed = [_passes(counts[f"curverl-s{s}"], 16)["pass@k"] - _passes(counts[f"maxrl-s{s}"], 16)["pass@k"]
                for s in range(40, 60)]  # fmt: skip
    m, (lo, hi), _ = _t(per_seed)
    assert rows[-1][7] == f"{100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"  # pass@16
    assert not objective_frontier.update_guide(r, path / "no_guide.md")
