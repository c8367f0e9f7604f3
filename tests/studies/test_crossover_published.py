"""The crossover's published reading, at its stage. Until every unit is in, docs/results.md's block, the README and
the guide quote none of it. Once complete, the committed reports are what the units give, and every number the
block, the README's crossover bullet and the guide's `digits20` section quote is the crossover report's or the
`digits20` frontier's: the checker runs here on synthetic units too, where one changed digit fails it."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare_crossover as cx  # noqa: E402
import objective_frontier as of  # noqa: E402
from test_compare_crossover import _write  # noqa: E402 (synthetic crossover units)
from test_published_results import _same  # noqa: E402

ASSETS = REPO / "studies" / "assets"
MEAN_CI = r"([+-]\d+\.\d+)(?: points)? \[(?:[\d.]+% t CI |95% CI )?([+-]\d+\.\d+), ([+-]\d+\.\d+)\]"
PAIR = r"\[(?:[\d.]+% (?:t )?CI )?([+-]\d+\.\d+), ([+-]\d+\.\d+)\]"  # any interval, with or without its mean
P_VALUE = r"\bp = (\d[\d.e+-]*\d|\d)"


def _flat(text: str) -> str:
    return " ".join(text.split())  # sentences wrap anywhere


def readme_bullet(readme: str) -> str:
    """The README's crossover bullet: the one naming `digits20` and the crossover ('' if none)."""
    bullets = re.split(r"\n(?=- )|\n\n", readme)
    return next((b for b in bullets if "`digits20`" in b and "crossover" in b), "")


def guide_section(guide: str) -> str:
    """The guide's `digits20` section: from its heading (a `## ` line naming `digits20`) to the next `## ` ('' if
    none)."""
    m = re.search(r"^## [^\n]*digits20[^\n]*$", guide, flags=re.M)
    if not m:
        return ""
    end = guide.find("\n## ", m.end())
    return guide[m.start() : end if end > 0 else len(guide)]


def _held(report: dict, frontier: dict) -> tuple[set, set]:
    """(every "mean [low, high]" triple, every p-value as printed) of the crossover report and the frontier."""
    triples = {(of._num(e[m]["mean"][j], "+"), of._num(e[m]["ci"][j][0], "+"), of._num(e[m]["ci"][j][1], "+"))
               for e in frontier["differences"] for m in of.METRICS for j in range(len(frontier["ks"]))}  # fmt: skip
    ps = set()
    for t in report["tests"].values():
        for ci in (t["ci"], t["ci_adjusted"]):
            triples.add((cx._pts(t["mean"]), cx._pts(ci[0]), cx._pts(ci[1])))
        ps |= {f"{p:{fmt}}" for p in (t["p"], t["p_holm"]) for fmt in (".2g", ".3g")}
    check = report["reproduction_check"]
    if "ci" in check:
        triples.add((cx._pts(check["pass_at_1_difference"]), cx._pts(check["ci"][0]), cx._pts(check["ci"][1])))
    return triples, ps


def published_errors(report: dict, frontier: dict, results: str, readme: str, guide: str) -> list[str]:
    """What the published reading gets wrong against the complete report and the `digits20` frontier (empty:
    nothing). `results` is docs/results.md's crossover block."""
    block, bullet, section = _flat(results), _flat(readme_bullet(readme)), guide_section(guide)
    sentence, errors = cx.readme_sentence(report), []
    units = report["units"]
    if f"{units['present']} of {units['expected']} units in" not in block:
        errors.append("results block: the unit count")
    for where, text in (("results block", block), ("README bullet", bullet)):
        if sentence not in text:
            errors.append(f"{where}: not the pre-registered sentence")
    for line in [*cx.endpoint_lines(report), cx.repro_line(report)]:
        if _flat(line) not in block:
            errors.append(f"results block: the report's line {line[:50]!r}")
    start, end = of.guide_markers("digits20")
    if start not in section or end not in section:
        errors.append("guide: no digits20 section holding its table markers")
    elif section[section.index(start) + len(start) : section.index(end)].strip() != of.guide_table(frontier):
        errors.append("guide: the digits20 table is not the frontier's")
    triples, ps = _held(report, frontier)
    pairs = {(lo, hi) for _, lo, hi in triples}
    prose = _flat(section[: section.find(start)] + section[section.find(end) :]) if start in section else ""
    for where, text in (("results block", block), ("README bullet", bullet), ("guide section", prose)):
        errors += [f"{where}: {q} is not the report's" for q in re.findall(MEAN_CI, text) if q not in triples]
        errors += [f"{where}: [{lo}, {hi}] is not the report's" for lo, hi in re.findall(PAIR, text)
                   if (lo, hi) not in pairs]
        errors += [f"{where}: p = {p} is not the report's" for p in re.findall(P_VALUE, text) if p not in ps]
    return errors


def _crossover_block(results: str) -> str:
    return results[results.index("<!-- crossover:start -->") : results.index("<!-- crossover:end -->")]


def test_the_crossover_is_published_at_its_stage():
    """Committed: before every unit is in, no decimal, p-value, CI or verdict in the block, none in the README or
    guide, and no `digits20` frontier; once complete, reports current and `published_errors` empty."""
    r = cx.crossover(ASSETS / "compare_crossover")
    results, readme, guide = ((REPO / p).read_text() for p in ("docs/results.md", "README.md", of.GUIDE))
    block = _crossover_block(results)
    frontier_path = ASSETS / "objective_frontier_digits20.json"
    if not r["complete"]:
        assert not re.search(r"\d\.\d|p = |\bCI\b|confirmed|crossover was", block), "a result before all units"
        assert "crossover was" not in readme and "crossover was" not in guide
        assert not readme_bullet(readme) and not guide_section(guide) and not frontier_path.exists()
        return
    committed = json.loads((ASSETS / "compare_crossover.json").read_text())
    assert _same(json.loads(json.dumps(r)), committed), \
        "stale: rerun `compare_objectives.py --summarize --assets_dir studies/assets/compare_crossover`"
    assert (ASSETS / "compare_crossover.md").read_text() == cx.table(committed) + "\n"
    frontier = json.loads(frontier_path.read_text())
    fresh = of.frontier(ASSETS, of.panel_sources(ASSETS, "digits20")[0], "digits20")
    assert _same(json.loads(json.dumps(fresh)), frontier), "stale: rerun `python studies/objective_frontier.py`"
    assert not published_errors(committed, frontier, block, readme, guide)


@pytest.fixture
def synthetic(tmp_path):
    """A complete synthetic crossover, its report and frontier, and a reading that quotes them right."""
    _write(tmp_path / "compare_crossover", cx.SEEDS, torch.Generator().manual_seed(11))
    r = json.loads(json.dumps(cx.crossover(tmp_path / "compare_crossover")))
    f = json.loads(json.dumps(of.frontier(tmp_path, of.panel_sources(tmp_path, "digits20")[0], "digits20")))
    e = f["differences"][0]
    cost = of._cell(e["pass@k"]["mean"][0], e["pass@k"]["ci"][0], "+")
    t = r["tests"]["iii"]
    results = "\n".join([f"{r['units']['present']} of {r['units']['expected']} units in.", cx.readme_sentence(r),
                         *cx.endpoint_lines(r), cx.repro_line(r), f"Its pass@1 cost: {cost} points (p = {t['p']:.2g})."])
    readme = f"# x\n\n- **Crossover on `digits20`.** {cx.readme_sentence(r)} Cost at pass@1: {cost}.\n- **Next**\n"
    start, end = of.guide_markers("digits20")
    guide = f"# g\n\n## The crossover on `digits20`\n\nPass@1 cost {cost}.\n\n{start}\n{of.guide_table(f)}\n{end}\n"
    return r, f, results, readme, guide


def test_the_checker_passes_a_faithful_reading(synthetic):
    assert published_errors(*synthetic) == []


@pytest.mark.parametrize("where", ["results", "readme", "guide"])
def test_the_checker_fails_one_changed_digit(synthetic, where):
    r, f, results, readme, guide = synthetic
    texts = {"results": results, "readme": readme, "guide": guide}
    text = texts[where]
    m = re.search(MEAN_CI, _flat(text.split("<!--")[0] if where == "guide" else text))
    lo = m.group(2)
    bumped = lo[:-1] + str((int(lo[-1]) + 1) % 10)
    texts[where] = text.replace(f"[{lo},", f"[{bumped},", 1)
    assert texts[where] != text
    errors = published_errors(r, f, texts["results"], texts["readme"], texts["guide"])
    assert errors and all(e.startswith(("results block", "README bullet", "guide")) for e in errors)


def test_the_checker_fails_a_changed_p_value_or_a_missing_sentence(synthetic):
    r, f, results, readme, guide = synthetic
    p = f"{r['tests']['iii']['p']:.2g}"
    assert published_errors(r, f, results.replace(f"(p = {p})", "(p = 0.0123)"), readme, guide) == \
        ["results block: p = 0.0123 is not the report's"]
    assert published_errors(r, f, results, readme.replace(cx.readme_sentence(r), "It worked."), guide) == \
        ["README bullet: not the pre-registered sentence"]
    assert "guide: the digits20 table is not the frontier's" in published_errors(
        r, f, results, readme, guide.replace("| `max8`", "| `max9`", 1))
