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


def _crossover_units(folder: Path, skip: str | None = None, study: str = "compare_crossover", commit: str = "d" * 40,
                     seed: int = 5) -> dict:
    """A pre-registered study's units (the crossover's 80 by default: 4 arms x seeds 40-59) on 12 problems, all at
    one commit."""
    import importlib

    study = importlib.import_module(study)
    gen, counts, p = torch.Generator().manual_seed(seed), {}, 12
    folder.mkdir(parents=True)
    for s in study.SEEDS:
        for i, arm in enumerate(study.ARMS):
            name = f"{arm}-s{s}"
            if name != skip:
                counts[name] = torch.randint(0, 10 + 2 * i, (p,), generator=gen).tolist()
                unit = _unit(name, counts[name], commit)
                unit["eval"].update(problem_ids=[f"q{j}" for j in range(p)], scored=[N] * p)
                (folder / f"{name}.json").write_text(json.dumps(unit))
    return counts


def _check_difference(e: dict, counts: dict, arm: str, minus: str, k: int, seeds: list[int]) -> None:
    """A panel's difference `e` (arm minus `minus`, paired over `seeds`) against brute-force pass@k and scipy's t."""
    per_seed = [_passes(counts[f"{arm}-s{s}"], k)["pass@k"] - _passes(counts[f"{minus}-s{s}"], k)["pass@k"]
                for s in seeds]  # fmt: skip
    m, ci, p = _t(per_seed)
    assert e["seeds"] == seeds and e["commits"] == "same"
    assert e["pass@k"]["mean"][k - 1] == pytest.approx(m, abs=1e-12)
    assert e["pass@k"]["ci"][k - 1] == pytest.approx(ci, abs=1e-9) and e["pass@k"]["p"][k - 1] == pytest.approx(p)


def test_the_digits20_panel_is_withheld_until_a_study_is_complete(assets, capsys):
    path, _ = assets
    _crossover_units(path / "compare_crossover", skip="curverl-s59")
    reports = objective_frontier.write(path)
    assert list(reports) == ["digits"] and not list(path.glob("objective_frontier_digits20*"))
    out = capsys.readouterr().out
    assert "the digits20 panel leaves out compare_crossover/ until that pre-registered study is complete (79 of 80 " \
        "units in" in out
    assert "leaves out compare_refill/ until that pre-registered study is complete (0 of 120 units in" in out


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
        _check_difference(e, counts, arm, minus, k, seeds)
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


def test_the_refill_study_joins_the_digits20_panel_once_complete_with_rloo_subtracted(assets):
    """Refill one unit short: the panel is the crossover's alone, as committed. Complete: its four arms join as
    sets of their own commit, RLOO becomes the reference, and each refill arm minus RLOO at seeds 60-89 is the
    brute-force paired t; no difference pairs the two studies (no common seed)."""
    path, _ = assets
    _crossover_units(path / "compare_crossover")
    refill = path / "compare_refill"
    counts = _crossover_units(refill, study="compare_refill", commit="e" * 40, seed=6)
    last = refill / "max8_refill-s89.json"
    held_back = last.read_bytes()
    last.unlink()
    alone = objective_frontier.write(path)["digits20"]
    assert alone["sources"] == ["compare_crossover"] and alone["reference"] == "max2" and alone["units"] == 80
    last.write_bytes(held_back)
    r = objective_frontier.write(path)["digits20"]
    assert r["sources"] == ["compare_crossover", "compare_refill"] and r["reference"] == "rloo" and r["units"] == 200
    assert {(s["arm"], s["commit"][0]) for s in r["sets"].values()} == {
        (a, "d") for a in ("max2", "max8", "maxrl", "curverl")} | {(a, "e") for a in ("rloo", "max2", "max8", "max8_refill")}
    assert all(set(e["seeds"]) <= set(range(40, 60)) or set(e["seeds"]) <= set(range(60, 90)) for e in r["differences"])
    seeds = list(range(60, 90))
    for arm, k in (("max2", 8), ("max8_refill", 8), ("max8", 1)):
        e = next(e for e in r["differences"] if e["set"] == f"{arm}@eeeeeee" and e["minus"] == "rloo@eeeeeee")
        _check_difference(e, counts, arm, "rloo", k, seeds)
    assert r["main_sets"]["max2"] == "max2@eeeeeee" and r["main_sets"]["maxrl"] == "maxrl@ddddddd"
