"""The published reading of the comparison quotes the committed summary: the primary table and every interval in
docs/results.md's result block and the README's caption and results bullet are numbers of
studies/assets/compare_objectives.json, at the strength its tests give them; the disclosures hold."""

import hashlib
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUMMARY = json.loads((REPO / "studies" / "assets" / "compare_objectives.json").read_text())
RESULTS = (REPO / "docs" / "results.md").read_text()
README = (REPO / "README.md").read_text()
BLOCK = RESULTS[RESULTS.index("<!-- result:start -->") : RESULTS.index("<!-- result:end -->")]
INTERVAL = r"\[([+-]\d+\.\d+), ([+-]\d+\.\d+)\]"


def _flat(text: str) -> str:
    return " ".join(text.split())  # sentences wrap anywhere


def _readme_reading() -> str:
    caption = README[README.index("*SmolLM2-135M-Instruct") : README.index("## Installation")]
    bullet = README[README.index("- **Real LLM on CPU**") : README.index("- **[Scoring caveat]")]  # digits only
    return _flat(caption + " " + bullet)


def _pts(x: float) -> str:
    """As the summary's tables print points: a nonzero value that rounds to 0.0 keeps two decimals."""
    return f"{100 * x:+.2f}" if 0 < abs(100 * x) < 0.05 else f"{100 * x:+.1f}"


def _summary_intervals() -> set[str]:
    """Every 95% interval of the summary (seed-level and bootstrap, every arm, metric and k), as "[lo, hi]"."""
    out = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("ci", "ci_adjusted") and isinstance(value, list):
                    rows = value if value and isinstance(value[0], list) else [value]
                    out.update(f"[{_pts(lo)}, {_pts(hi)}]" for lo, hi in rows)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(SUMMARY)
    return out


def _pass16_minus_base() -> dict[str, dict]:
    """pass@16 of Min@4 (seeds 0-9) and RLOO (seeds 0-9 and 10-24) minus the base model's, per seed, from the
    committed units: the seed-level t of `compare_seed_level.minus_base` (the base model held fixed)."""
    import sys

    sys.path.insert(0, str(REPO / "studies"))
    from compare_replication import pass_at_k
    from compare_seed_level import minus_base
    from compare_summary import load_units

    assets = REPO / "studies" / "assets"
    ten, rep = load_units(assets / "compare_objectives"), load_units(assets / "compare_objectives_replication")
    base = pass_at_k(ten["base"], 16)
    out = {}
    for key, units, arm, seeds in (("min4 0-9", ten, "min4", range(10)), ("rloo 0-9", ten, "rloo", range(10)),
                                   ("rloo 10-24", rep, "rloo", range(10, 25))):  # fmt: skip
        out[key] = minus_base([pass_at_k(units[f"{arm}-s{s}"], 16) for s in seeds], base)
    return out


@pytest.mark.parametrize("where", ["docs/results.md result block", "README caption and results bullet"])
def test_every_quoted_interval_is_in_the_summary(where):
    """The README also quotes the replication's costs (the frontier report's, test_objective_frontier) and the
    head-to-head's primaries and its post hoc between-set interval (its report's); both quote pass@16 against the
    base model (`_pass16_minus_base`, from the units)."""
    text = _flat(BLOCK) if where.startswith("docs") else _readme_reading()
    quoted = {f"[{lo}, {hi}]" for lo, hi in re.findall(INTERVAL, text)}
    assert len(quoted) >= (20 if where.startswith("docs") else 5)
    held = _summary_intervals() | {f"[{_pts(lo)}, {_pts(hi)}]" for t in _pass16_minus_base().values() for lo, hi in [t["ci"]]}
    if not where.startswith("docs"):
        frontier = json.loads((REPO / "studies" / "assets" / "objective_frontier.json").read_text())
        held |= {f"[{_pts(lo)}, {_pts(hi)}]" for e in frontier["differences"] for m in ("pass@k", "pass^k")
                 for lo, hi in e[m]["ci"]}  # fmt: skip
        h2h = json.loads((REPO / "studies" / "assets" / "compare_objectives_headtohead.json").read_text())
        held |= {f"[{_pts(lo)}, {_pts(hi)}]" for t in h2h.get("tests", {}).values() for lo, hi in [t["ci"]]}
        held |= {f"[{_pts(lo)}, {_pts(hi)}]" for b in h2h.get("between_sets", {}).values()
                 for lo, hi in [b["random_effects"]["ci"]]}  # fmt: skip
    assert not quoted - held, f"{where} quotes intervals the summary does not hold"


def test_primary_table_and_readme_quote_the_summary():
    sl = SUMMARY["seed_level"]
    readme = _readme_reading()
    for e in sl["primaries"]:
        row = next(line for line in BLOCK.splitlines() if line.startswith(f"| {e['arm']} | "))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == " / ".join(f"{100 * d:+.1f}" for d in e["per_seed"]), row
        assert cells[3] == f"{_pts(e['mean'])} [{_pts(e['ci'][0])}, {_pts(e['ci'][1])}]", row
        assert cells[4] == f"{e['p']:.2g}" or cells[4] == f"{e['p']:.3f}", row
        assert cells[5] == f"{e['p_holm']:.2g}" or cells[5] == f"{e['p_holm']:.3f}", row
        assert cells[6] == f"[{_pts(e['ci_adjusted'][0])}, {_pts(e['ci_adjusted'][1])}]", row
        lo, hi = e["detectable_range"]
        assert cells[7] == f"{100 * e['detectable']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]", row
        assert cells[8] == (", ".join(map(str, e["ceiling_seeds"])) or "-"), row
        # the README gives each primary with its adjusted interval (the one that goes with the Holm p)
        assert f"{_pts(e['mean'])} [{_pts(e['ci_adjusted'][0])}, {_pts(e['ci_adjusted'][1])}]" in readme or \
            f"{_pts(e['mean'])} points, adjusted 98.3% t CI [{_pts(e['ci_adjusted'][0])}" in readme, e["arm"]  # fmt: skip
    level = 1 - sl["alpha"] / len(sl["primaries"])
    assert f"{level:.1%}" in BLOCK and f"{level:.1%}" in readme
    # no unadjusted interval of a primary stands next to a Holm p in the README
    for e in sl["primaries"]:
        assert f"[{_pts(e['ci'][0])}, {_pts(e['ci'][1])}], Holm" not in readme


def test_seeds_3_to_9_ceiling_and_power_are_quoted_from_the_summary():
    sl = SUMMARY["seed_level"]
    block, readme = _flat(BLOCK), _readme_reading()
    assert sl["seen_seeds"] == [0, 1, 2] and "chosen after seeds 0-2" in block and "seeds 0-2 were seen" in readme
    for e in sl["unseen"]:
        assert e["seeds"] == list(range(3, 10))
        quoted = f"{_pts(e['mean'])} [{_pts(e['ci'][0])}, {_pts(e['ci'][1])}]"
        assert quoted in block, e["arm"]
        if e["arm"] in ("max8", "min4"):
            assert quoted in readme, e["arm"]
    (max8,) = [e for e in sl["primaries"] if e["arm"] == "max8"]
    rloo8 = [curve[7] for curve in SUMMARY["arms"]["rloo"]["pass@k"]["per_seed"]]
    at_ceiling = [s for s, v in zip(SUMMARY["arms"]["rloo"]["seeds"], rloo8) if v >= 0.98]
    assert max8["ceiling_seeds"] == at_ceiling
    assert f"at seeds {', '.join(map(str, at_ceiling[:-1]))} and {at_ceiling[-1]}" in block
    assert " and ".join(f"{100 * rloo8[s]:.1f}" for s in at_ceiling[-2:]) + "%" in block
    assert f"{len(at_ceiling)} of {len(rloo8)} seeds" in readme
    room = ", ".join(f"{100 * (1 - rloo8[s]):.1f}" for s in at_ceiling[:-1]) + f" and {100 * (1 - rloo8[at_ceiling[-1]]):.1f}"
    smallest = sorted(max8["per_seed"])[: len(at_ceiling)]
    assert f"could gain at most {room} points" in block
    assert sorted(max8["per_seed"][s] for s in at_ceiling) == smallest  # "its smallest differences are at these seeds"
    effects = [100 * e["detectable"] for e in sl["primaries"]]
    ends = [100 * x for e in sl["primaries"] for x in e["detectable_range"]]
    assert f"from {min(ends):.1f} to {max(ends):.1f} points" in block
    assert f"{min(effects):.1f}-{max(effects):.1f}" not in readme or f"{min(ends):.1f}" in readme
    assert "design detects" not in block + readme  # the detectable effect is an estimate, not a design property


def test_base_model_sign_test_is_quoted_from_the_summary():
    sign = SUMMARY["base_sign_test"]
    units, seeds = sign["units"], sign["seeds"]
    assert units["above"] == units["n"] and units["ties"] == 0  # every trained unit, as the text says
    block, readme = _flat(BLOCK), _readme_reading()
    assert f"All {units['n']} trained units" in block + readme
    assert f"p = 2 x 0.5^{units['n']} = {units['p']:.2g}" in block and units["p"] == 2 * 0.5 ** units["n"]
    assert f"p = {units['p']:.2g} over units, {seeds['p']:.1g} over the {seeds['n']} seeds" in readme
    assert f"{100 * sign['base_pass@1']:.1f}%" in block
    assert f"by {100 * units['min']:.1f} to {100 * units['max']:.1f} points" in block


def test_pass16_below_the_base_model_is_quoted_from_the_units():
    """Beside "all 50 trained units beat the base model's pass@1", its cost at large k (issue 49, F4): the pass@16
    of Min@4 and of RLOO at seeds 10-24 below the base model's, each interval below 0, quoted as computed."""
    gaps = _pass16_minus_base()
    base = f"{100 * gaps['min4 0-9']['base']:.1f}%"
    block, readme = _flat(BLOCK), _readme_reading()

    def cell(t):
        return f"{_pts(t['mean'])} [{_pts(t['ci'][0])}, {_pts(t['ci'][1])}]"

    for key in ("min4 0-9", "rloo 10-24"):
        assert gaps[key]["ci"][1] < 0, key  # "fell below": the interval excludes 0
    m, r10, r0 = gaps["min4 0-9"], gaps["rloo 10-24"], gaps["rloo 0-9"]
    assert f"pass@16 fell below the base model's {base} for Min@4, {cell(m)} over its {m['n']} seeds (below at " \
        f"{m['n'] - m['above']} of {m['n']}), and for RLOO at the replication's seeds 10-24, {cell(r10)} (at seeds 0-9: " \
        f"{cell(r0)})" in block
    assert f"pass@16 fell below the base model's {base} for Min@4 ({cell(m)}, {m['n']} seeds) and RLOO at seeds " \
        f"10-24 ({cell(r10)}; exploratory, the base is one unit)" in readme
    assert "it is one unit (one evaluation)" in block


def test_the_bandit_quotes_each_objective_s_cost_from_its_json():
    """Beside "each raises its own metric most" (README and docs/results.md), what each gave up (issue 49, F4), as
    studies/assets/bandit_diagnostic.json has it: every quoted value fell from the uniform start."""
    bandit = json.loads((REPO / "studies" / "assets" / "bandit_diagnostic.json").read_text())
    start, final = bandit["start"], bandit["final"]
    falls = [("best_of_k", "mean"), ("best_of_k", "lowertail"), ("mean", "max"), ("worst_of_k", "max")]
    assert all(final[run][m] < start[m] for m, run in falls)

    def f(x):
        return f"{x:.3f}"

    results, readme = _flat(RESULTS), _readme_reading() + " " + _flat(README)
    assert f"best of 4 fell from {f(start['best_of_k'])} to {f(final['mean']['best_of_k'])} under Mean and to " \
        f"{f(final['lowertail']['best_of_k'])} under the worst of 4, and under best of 4 the mean fell from " \
        f"{f(start['mean'])} to {f(final['max']['mean'])} and the worst of 4 from {f(start['worst_of_k'])} to " \
        f"{f(final['max']['worst_of_k'])}" in results
    assert f"each raises its own metric most (within 0.003 of the optimum) and lowers another (best of 4: worst of 4 " \
        f"from {f(start['worst_of_k'])} to {f(final['max']['worst_of_k'])})" in readme


def test_withdrawn_and_overstated_wordings_are_gone():
    text = _flat(BLOCK) + " " + _readme_reading()
    for phrase in ("each column's highest value is on the arm trained for it", "did not raise", "level with it",
                   "the trade-off its objective implies", "five objectives", "therefore measure the same thing."):
        assert phrase.lower() not in text.lower(), phrase
    assert "therefore measure the same thing" not in _flat(RESULTS).replace('"therefore measure the same thing"', "")


def test_quickstart_eval_reuse_is_disclosed():
    """The quickstart evaluates `max_eval_samples` rows of the digits test split: the first of the comparison's 200."""
    import yaml

    from ordergrad_trl.tasks.data import load_math_dataset

    cfg = yaml.safe_load((REPO / "recipes" / "configs" / "cpu_quickstart.yaml").read_text())
    ids = load_math_dataset(cfg["dataset_name"], split=cfg["dataset_test_split"])["id"]
    unit = json.loads((REPO / "studies" / "assets" / "compare_objectives" / "rloo-s0.json").read_text())
    assert set(ids[: cfg["max_eval_samples"]]) <= set(unit["eval"]["problem_ids"]) == set(ids[:200])
    n = cfg["max_eval_samples"]
    assert f"first {n} of the comparison's 200 test problems" in _flat(README)
    assert f"they are the first {n} (`{ids[0]}` to `-{ids[n - 1].rsplit('-', 1)[1]}`) of the 200" in _flat(RESULTS)


# The dated revisions a frozen pre-registration may carry, each undone before its text is hashed: a note in the
# file's revision style and the edit it names, nothing of substance (issue 62: the study configs moved).
REVISIONS = ((r"\s\*\(Path updated 2026-12-07, issue 62:\s.*?\)\*", ""),
             (r"studies/configs/(compare_objectives|compare_digits20)\.yaml", r"recipes/configs/\1.yaml"))  # fmt: skip


def as_preregistered(text: str) -> str:
    """A pre-registration section's text as committed: its dated revisions (`REVISIONS`) undone."""
    for pattern, original in REVISIONS:
        text = re.sub(pattern, original, text, flags=re.S)
    return text


def test_the_replication_preregistration_is_unchanged():
    """The pre-registration section's text is frozen once a unit ran: its hash is that of commit 9fd3a65's text
    (its dated revisions undone, `as_preregistered`)."""
    start = RESULTS.index("### Pre-registration: a confirmatory replication")
    end = RESULTS.index("<!-- replication:start -->")
    digest = hashlib.sha256(as_preregistered(RESULTS[start:end]).rstrip("\n").encode() + b"\n\n").hexdigest()
    assert digest == "a565f87264f1f4b9e8778817dae1728d42b71d376ff63c54b2a4c81e6dfc190a"


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and isinstance(b, (int, float)):
        return a == pytest.approx(b, rel=1e-12, abs=1e-15)
    return a == b


def test_the_replication_report_is_current_and_quoted_at_its_stage():
    """The committed replication report is what its units give now, and the README and docs/results.md say what
    its stage allows: the pre-registered sentence once the test has run, "under way" and no p-value before."""
    import sys

    sys.path.insert(0, str(REPO / "studies"))
    from compare_replication import _pts as pts
    from compare_replication import SEEDS, readme_sentence, replication

    assets = REPO / "studies" / "assets" / "compare_objectives_replication"
    committed = json.loads((assets.parent / f"{assets.name}.json").read_text())
    fresh = json.loads(json.dumps(replication(assets, REPO / "studies" / "assets" / "compare_objectives")))
    # floats to 1e-12: a reduction's last bit may differ between CPUs
    assert _same(fresh, committed), \
        "stale: rerun `compare_objectives.py --summarize --assets_dir studies/assets/compare_objectives_replication`"
    status = _flat(RESULTS[RESULTS.index("<!-- replication:start -->") : RESULTS.index("<!-- replication:end -->")])
    assert f"{committed['units']['present']} of {committed['units']['expected']} units in" in status
    for arm, e in committed.get("exploratory_arms", {}).items():  # e.g. maxrl: its progress as the report has it
        assert f"Exploratory arm `{arm}`" in status and f"{len(e['seeds'])} of {len(SEEDS)} seeds in" in status, arm
        for ref, m in e["minus"].items():  # once every seed is in, each interval is quoted as the report has it
            if "ci" in m:
                assert f"minus {ref} {pts(m['mean'])} points [unadjusted 95% t CI {pts(m['ci'][0])}, {pts(m['ci'][1])}]" \
                    in status, (arm, ref)
    readme = _readme_reading()
    if committed["complete"]:
        sentence = readme_sentence(committed)
        assert sentence in _flat(README) and sentence in status
        t, det, pooled, ceiling = committed["test"], committed["detectable"], committed["pooled"], committed["ceiling"]
        assert f"{pts(t['mean'])} points [95% CI {pts(t['ci'][0])}, {pts(t['ci'][1])}], p = {t['p']:.2g}" in readme
        assert f"t = {t['t']:.2f} ({t['df']} df)" in status and f"**{t['verdict']}**" in status
        assert f"seed SD of d ({100 * det['sd']:.1f} points; its 95% chi-square interval " \
            f"[{100 * det['sd_ci'][0]:.1f}, {100 * det['sd_ci'][1]:.1f}]): {100 * det['effect']:.1f} points" in status
        assert f"{100 * det['effect_range'][0]:.1f} to {100 * det['effect_range'][1]:.1f}" in status
        assert f"at {len(ceiling['seeds'])} of {ceiling['of']} seeds" in status
        assert f"{len(committed['failures'])} failed attempts" in status
        assert f"Exploratory, not the pre-registered test:** seeds 0-24 pooled with the ten-seed run " \
            f"({pooled['n']} seeds): mean {pts(pooled['mean'])} points [{pts(pooled['ci'][0])}, " \
            f"{pts(pooled['ci'][1])}], p = {pooled['p']:.2g}" in status
        assert f"Reproduction check: {pooled['reproduction_check']['status']}" in status
        d = [row["d"] for row in committed["per_seed"]]
        positive = sum(x > 0 for x in d)
        assert f"d was positive at {positive} of {len(d)} seeds, from {pts(min(d))} to {pts(max(d))}" in status
    else:
        assert "replication on 15 fresh seeds is under way" in readme
        assert not re.search(r"replication[^.]*\bp\s*[=<]", readme + " " + status)
