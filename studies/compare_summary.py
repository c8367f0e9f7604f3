"""Summary of `studies/compare_objectives.py`: the seed-level primaries, pass@k and pass^k per arm, and a figure.

Reads the per-unit JSON files (`<arm>-s<seed>.json`, `base.json`) and writes, beside that folder,
`compare_objectives.json` (every number), `compare_objectives.md` (a table) and `compare_objectives.png`.

Statistics. A problem's pass@k and pass^k are the unbiased U-statistics of its c correct of n samples, as the eval
report computes them (`compare_seeds.COUNT_METRICS`: 1 - C(n-c,k)/C(n,k) and C(c,k)/C(n,k)). An arm's value is
the mean over its seeds and the held-out problems. Inference is at the seed level (`compare_seed_level.seed_level`,
the pre-registered analysis in docs/results.md): per-seed paired differences against the baseline arm, a t test and
interval over seeds, Holm over the primaries and the detectable effect. The percentile bootstraps that resample
seeds and problems together are a secondary view, labelled so in the table (with few seeds their seed part
resamples a handful of values and runs narrow: some of their intervals exclude 0 where the seed-level ones do not).
Every table gives each arm's number of seeds, as arms may have different seeds.

Each arm's own training objective (e.g. `TopM:2` at K=4) is also evaluated on every model, as the same U-statistic
(`metrics.lstat_metric` with that arm's weights), as exploratory point estimates.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
import warnings
from pathlib import Path

import torch

from compare_plot import plot  # studies/, beside this file
from compare_seed_level import base_sign_test, seed_level, seed_level_table, stable
from unit_records import load_units as read_units
from ordergrad_trl.core.estimators import ESTIMATORS
from ordergrad_trl.core.stats import percentile_interval, resample_means
from ordergrad_trl.evaluation.compare_seeds import COUNT_METRICS, count_matrix
from ordergrad_trl.evaluation.metrics import lstat_metric

BOOTSTRAP = 2000
SECONDARY = ("**Secondary** (percentile bootstrap over seeds and problems, not the pre-registered test; with few "
             "seeds it runs narrower than the seed-level t intervals above).")
METRICS = {"pass@k": "pass@", "pass^k": "pass^"}  # the summary's name -> its key prefix in `COUNT_METRICS`
# Paired differences against: GRPO (the usual baseline), RLOO (OrderGrad's K=1 arm: the expected reward without
# GRPO's per-group std weighting, so it differs from the other OrderGrad arms only in the objective) and the base.
REFERENCES = ("grpo", "rloo", "base")
EVAL_KEYS = ("dataset_name", "dataset_test_split", "temperature", "max_completion_length", "system_prompt")


def _count_groups(n: int) -> torch.Tensor:
    """`(n+1, n)` 0/1 groups: row c has c ones, last."""
    return count_matrix(torch.arange(n + 1), n)


def curves(correct: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """`(..., P)` correct counts of n samples -> {metric: `(..., P, n)`} per-problem values at k = 1..n: the eval
    report's own per-problem estimates (`compare_seeds.COUNT_METRICS`), tabled once per count."""
    groups = _count_groups(n)  # (n+1, n)
    out = {}
    for metric, prefix in METRICS.items():
        table = torch.stack([COUNT_METRICS[prefix](groups, k) for k in range(1, n + 1)], -1)  # (n+1, n)
        out[metric] = table[correct.long()]
    return out


def _lstat_objective(flags: list[str], n: int) -> tuple[str, int]:
    """An arm's recipe flags -> the L-statistic (preset, K) it trains, groups of n rollouts: its estimator's registry
    row (`target`) at the arm's parsed config (`arm_config`), e.g. GRPO's is the expected reward (its std weighting
    aside) and MaxRL's `MaxRL:(n-1)` at K = n-1 (docs/objectives.md)."""
    config = arm_config(flags, n)
    estimator = ESTIMATORS[config.ordergrad_estimator]
    given = {"objective": config.ordergrad_objective, "k": config.ordergrad_k}
    target = estimator.targets(n, **{p: v for p, v in given.items() if p in estimator.params and v is not None})
    if target is None:
        raise ValueError(f"no L-statistic recorded for an arm with --ordergrad_estimator {estimator.name}")
    return target


def objective_specs(arm_flags: dict[str, list[str]], n: int) -> dict[str, tuple[str, int]]:
    """Each arm's training objective as (preset, K) for groups of n rollouts (`_lstat_objective`)."""
    return {arm: _lstat_objective(flags, n) for arm, flags in arm_flags.items()}


def objective_values(correct: torch.Tensor, n: int, objectives: list[tuple[str, int]]) -> torch.Tensor:
    """`(..., P)` correct counts of n samples -> `(..., P, m)`: each objective's U-statistic on each problem."""
    groups = _count_groups(n)  # (n+1, n)
    table = torch.stack([lstat_metric(groups, preset, k) for preset, k in objectives], -1)  # (n+1, m)
    return table[correct.long()]


ARM_FLAGS = ("--ordergrad_objective", "--ordergrad_k", "--ordergrad_estimator", "--ordergrad_estimator_kwargs",
             "--scale_rewards", "--ordergrad_prompt_weight", "--ordergrad_prompt_weight_window",
             "--ordergrad_dynamic_sampling", "--ordergrad_dynamic_sampling_max_rounds")  # what an arm may set
# (dynamic sampling chooses which groups train, not their advantages: the plan of an arm does not read it)


@functools.cache
def _recipe_parser():
    """`recipes/math_cvar.py`'s own parser (`RecipeParser`), built once: an arm's flags are parsed as the recipe that
    trains the arm parses them."""
    recipes = str(Path(__file__).resolve().parents[1] / "recipes")
    if recipes not in sys.path:
        sys.path.append(recipes)  # after studies/: the recipe's helpers are found, no module here is shadowed
    from math_cvar import RecipeParser

    return RecipeParser()


@contextlib.contextmanager
def _quiet():
    """No warning and no log record while an arm's config is built (its checks speak to a user launching a run)."""
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(disabled)


def arm_config(flags: list[str], n: int):
    """An arm's recipe flags (`--flag value` pairs of `ARM_FLAGS`; unset: the recipe's defaults) parsed by the
    recipe's own parser into its `OrderGradConfig`, for groups of n rollouts (one group per batch); building it builds
    the trainer's plan (`ordergrad_plan`). `ValueError` naming a flag an arm cannot set, the parser's message for a
    bad value, or the config's own (the plan's) message. Prints nothing."""
    if len(flags) % 2 or any(not isinstance(f, str) for f in flags) or any(v.startswith("--") for v in flags[1::2]):
        raise ValueError(f"arm flags must be '--flag value' pairs, got {flags!r}")
    unknown = [f for f in flags[::2] if f not in ARM_FLAGS]
    if unknown:
        raise ValueError(f"an arm cannot set {unknown[0]}; its flags are {', '.join(ARM_FLAGS)}")
    given = ["--num_generations", str(n), "--per_device_train_batch_size", str(n), "--use_cpu", "true", "--bf16",
             "false", *flags]  # fmt: skip
    with _quiet():
        return _recipe_parser().parse_args_into_dataclasses(args=given)[1]


def plan_of_flags(flags: list[str], n: int):
    """The trainer's plan of an arm's recipe flags over groups of n rollouts: the one its parsed config builds
    (`arm_config`); `ValueError` naming a flag an arm cannot set, a bad value, or the plan's own message."""
    return arm_config(flags, n).ordergrad_plan


def group_weights(arm_flags: dict[str, list[str]], n: int) -> dict[str, list[float]]:
    """Each arm's weight on a group with c = 0..n successes of n rollouts, relative to the arm's largest.

    With 0/1 rewards an arm's advantages within a group are a multiple of (r - group mean); the multiple (the
    advantage gap between a success and a failure) is the arm's weight on that group, 0 at c = 0 and c = n. Adam
    divides any global scale out, so these relative weights are what sets the arms apart. `arm_flags` are the
    recipe flags of each arm (`--ordergrad_objective X --ordergrad_k K`, `--ordergrad_estimator E`, `--scale_rewards`),
    built into the trainer's plan (`core.plan.build_plan`).
    """
    groups = _count_groups(n)  # (n+1, n)
    mixed = torch.zeros(n + 1, dtype=torch.bool)
    mixed[1:n] = True
    out = {}
    for arm, flags in arm_flags.items():
        adv = plan_of_flags(flags, n).scaled_advantages(groups)  # what the trainer uses (curverl: the groups are
        # their own reference, every count 1..n-1 once)
        gap = torch.where(mixed, adv[:, -1] - adv[:, 0], 0.0)  # (n+1,) a success's advantage minus a failure's
        out[arm] = (gap / gap.max()).tolist()
    return out


def _ci(samples: torch.Tensor) -> list[list[float]]:
    """`(B, n)` bootstrap draws -> per-k [low, high] 95% percentile interval."""
    return percentile_interval(samples).T.tolist()  # (n, 2)


def load_units(assets: Path) -> dict[str, dict]:
    """Every unit record in `assets` by name, checked (`unit_records.read_unit`: ValueError naming the file)."""
    return read_units(assets)


def check_counts(unit: dict) -> None:
    """A unit's eval as the driver writes it: per problem an integer count of correct samples in [0, n] and n scored
    samples; a hand-edited or cut file is refused naming the unit (it would otherwise index past the tables)."""
    ev, n = unit["eval"], unit["num_samples"]
    rows = len(ev["problem_ids"])
    ok = len(ev["correct"]) == rows == len(ev["scored"]) and all(
        isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= n for c in ev["correct"])  # fmt: skip
    if not ok:
        raise ValueError(f"unit {unit['unit']}: its correct counts are not {rows} integers in [0, {n}], one per problem; "
                         "the file was edited or is corrupt: rerun it")


def check_units(units: dict[str, dict]) -> tuple[dict, dict]:
    """One protocol: every unit scored the same problems with n samples and sampled its eval alike, and every
    trained unit trained alike (a unit from an older config is stale). Returns (a unit, the first trained unit)."""
    any_unit = next(iter(units.values()))
    n, ids = any_unit["num_samples"], any_unit["eval"]["problem_ids"]
    for u in units.values():
        if u["eval"]["problem_ids"] != ids or u["num_samples"] != n or min(u["eval"]["scored"]) != n:
            raise ValueError(f"unit {u['unit']}: other problems or samples than {any_unit['unit']}; rerun it")
        check_counts(u)
    backends = {u["unit"]: u.get("eval_backend", "hf") for u in units.values()}  # units before it was recorded: hf
    if len(set(backends.values())) > 1:
        raise ValueError(f"units sampled their eval with different backends {backends}: rerun the odd ones with "
                         "--eval_backend, or keep each backend's units in their own --assets_dir")  # fmt: skip
    first_trained = next((u for u in units.values() if u["arm"] != "base"), any_unit)
    for u in units.values():
        keys = EVAL_KEYS if u["arm"] == "base" else (*u.get("config", {}), "train_overrides")
        ref = first_trained if u["arm"] != "base" else any_unit
        mine, theirs = ({k: {**x.get("config", {}), "train_overrides": x.get("train_overrides")}.get(k) for k in keys}
                        for x in (u, ref))  # fmt: skip
        if mine != theirs:
            raise ValueError(f"unit {u['unit']} ran with {mine}, unit {ref['unit']} with {theirs}: delete the stale "
                             "unit's JSON and rerun it")  # fmt: skip
    return any_unit, first_trained


def summarize(
    assets: Path,
    arms: list[str],
    seed: int = 0,
    arm_flags: dict[str, list[str]] | None = None,
    primary_baseline: str = "rloo",
    seen_seeds: tuple = (),
) -> dict | None:
    """Writes `<assets>.json/.md/.png` beside `assets`. `arm_flags` (each arm's recipe flags) adds `group_weights`
    and each arm's own objective, which with `primary_baseline` defines the seed-level primaries (`seed_level`);
    `seen_seeds` are the seeds seen before the primaries were chosen (the primaries are also tested without them)."""
    units = load_units(assets)
    trained = {arm: sorted((u for u in units.values() if u["arm"] == arm), key=lambda u: u["seed"]) for arm in arms}
    trained = {arm: us for arm, us in trained.items() if us}
    if not units:
        print(f"no finished units in {assets}")
        return None
    any_unit, first_trained = check_units(units)
    n, ids = any_unit["num_samples"], any_unit["eval"]["problem_ids"]
    # Every arm's objective evaluated on every model: does each arm raise its own objective most?
    n_train = first_trained.get("config", {}).get("num_generations") or n
    specs = objective_specs({a: f for a, f in arm_flags.items() if a in trained}, n_train) if arm_flags else {}
    objectives = list(dict.fromkeys(specs[arm] for arm in arms if arm in specs and specs[arm][1] <= n))
    gen = torch.Generator().manual_seed(seed)
    num_p = len(ids)
    prob_idx = torch.randint(num_p, (BOOTSTRAP, num_p), generator=gen)  # (B, P), shared by all arms: paired

    summary: dict = {"num_problems": num_p, "num_samples": n, "ks": list(range(1, n + 1)), "arms": {}}
    if objectives:
        summary["objectives"] = [{"name": f"{p}@{k}", "trained_by": [a for a in arms if specs.get(a) == (p, k)]}
                                 for p, k in objectives]  # fmt: skip
    values: dict[str, dict[str, torch.Tensor]] = {}  # arm -> metric -> (S, P, n) per-problem values
    seeds: dict[str, list] = {}
    seed_draws: dict[int, torch.Tensor] = {}

    def seed_idx(count: int) -> torch.Tensor:  # (B, S); arms with as many seeds share draws: s pairs with s
        if count not in seed_draws:
            seed_draws[count] = torch.randint(count, (BOOTSTRAP, count), generator=gen)
        return seed_draws[count]

    for arm, us in [("base", [units["base"]] if "base" in units else [])] + list(trained.items()):
        if not us:
            continue
        correct = torch.tensor([u["eval"]["correct"] for u in us])  # (S, P)
        per = curves(correct, n)  # metric -> (S, P, n)
        if objectives:
            per["objectives"] = objective_values(correct, n, objectives)  # (S, P, m)
        values[arm], seeds[arm] = per, [u["seed"] for u in us]
        entry = {"seeds": seeds[arm], "wall_s": [u["wall_s"] for u in us]}
        idx = seed_idx(len(us))
        for metric, v in per.items():
            entry[metric] = {"value": v.mean((0, 1)).tolist(), "ci": _ci(resample_means(v, prob_idx, idx)),
                             "per_seed": v.mean(1).tolist()}  # fmt: skip
        if us[0]["train_log"]:
            steps = [row["step"] for row in us[0]["train_log"]]
            rewards = torch.tensor([[row["reward"] for row in u["train_log"]] for u in us])  # (S, steps)
            entry["train_reward"] = {"step": steps, "mean": rewards.mean(0).tolist(), "per_seed": rewards.tolist()}
        summary["arms"][arm] = entry
    for ref in REFERENCES:
        if ref not in values:
            continue
        for arm in values:
            if arm == ref:
                continue
            # Paired: seed s against the reference's seed s (the base model has no seed: it pairs with every seed)
            common = [s for s in seeds[arm] if "base" in (arm, ref) or s in seeds[ref]]
            common = seeds[ref] if arm == "base" else common
            if not common:
                continue
            mine = [0] * len(common) if arm == "base" else [seeds[arm].index(s) for s in common]
            theirs = [0] * len(common) if ref == "base" else [seeds[ref].index(s) for s in common]
            out = summary["arms"][arm].setdefault(f"minus_{ref}", {})
            for metric, v in values[arm].items():
                diff = v[mine] - values[ref][metric][theirs]  # (S_common, P, n) float64
                out[metric] = {"value": diff.mean((0, 1)).tolist(),
                               "ci": _ci(resample_means(diff, prob_idx, seed_idx(len(common))))}  # fmt: skip
            if "base" not in (arm, ref) and not common == seeds[arm] == seeds[ref]:
                out["seeds"] = common  # the seeds both arms have, where they differ
    if primary_baseline in values and objectives:
        summary["seed_level"] = seed_level(summary, primary_baseline, seen_seeds=tuple(seen_seeds))
    if base_sign_test(summary):
        summary["base_sign_test"] = base_sign_test(summary)

    if arm_flags and first_trained.get("config", {}).get("num_generations"):
        present = {arm: arm_flags[arm] for arm in summary["arms"] if arm in arm_flags}
        summary["group_weights"] = {"num_generations": n_train, "arms": group_weights(present, n_train)}

    out = assets.parent / f"{assets.name}.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    (assets.parent / f"{assets.name}.md").write_text(table(summary) + "\n")
    plot(summary, assets.parent / f"{assets.name}.png")
    print(table(summary))
    return summary


def _cell(value: float, ci: list[float], fmt: str) -> str:
    """"value [low, high]" in %."""
    return f"{stable(100 * value):{fmt}} [{stable(100 * ci[0]):{fmt}}, {stable(100 * ci[1]):{fmt}}]"


def _cells(curves: dict, ks: list[int], fmt: str) -> list[str]:
    """`_cell` for pass@k at ks and pass^k at ks[1:] (pass^1 = pass@1)."""
    return [_cell(curves[metric]["value"][k - 1], curves[metric]["ci"][k - 1], fmt)
            for metric, kk in (("pass@k", ks), ("pass^k", ks[1:])) for k in kk]  # fmt: skip


def table(summary: dict, ks=(1, 2, 4, 8, 16)) -> str:
    ks = [k for k in ks if k <= summary["num_samples"]]
    head = [f"pass@{k}" for k in ks] + [f"pass^{k}" for k in ks[1:]]
    lines = []
    if summary.get("seed_level"):
        lines += seed_level_table(summary["seed_level"], head, ks, summary.get("base_sign_test")) + [""]
        lines += [f"{SECONDARY} Values per arm (%):", ""]
    lines += ["| arm | seeds | " + " | ".join(head) + " |", "|---|---|" + "---|" * len(head)]
    for arm, entry in summary["arms"].items():
        lines.append(f"| {arm} | {len(entry['seeds'])} | " + " | ".join(_cells(entry, ks, ".1f")) + " |")
    lines.append("")
    lines.append(f"{summary['num_problems']} held-out problems x {summary['num_samples']} samples; 95% bootstrap CIs "
                 "over seeds and problems.")  # fmt: skip
    seed_sets = {tuple(e["seeds"]) for arm, e in summary["arms"].items() if arm != "base"}
    if len(seed_sets) > 1:
        lines[-1] += (" The arms have different seeds (column seeds): their means are over different seeds, so compare "
                      "arms through the paired differences, which use the seeds both arms have.")  # fmt: skip
    if any(len(entry["seeds"]) > 1 for entry in summary["arms"].values()):
        lines += ["", "Per seed (%; seed s of every arm shares its data order and sampling seed):", ""]
        lines.append("| arm | seeds | " + " | ".join(head) + " |")
        lines.append("|---|---|" + "---|" * len(head))
        for arm, entry in summary["arms"].items():
            cells = [" / ".join(f"{stable(100 * s[k - 1]):.1f}" for s in entry[metric]["per_seed"])
                     for metric, kk in (("pass@k", ks), ("pass^k", ks[1:])) for k in kk]  # fmt: skip
            seeds = ", ".join(str(s) for s in entry["seeds"] if s is not None) or "-"
            lines.append(f"| {arm} | {seeds} | " + " | ".join(cells) + " |")
    for ref, name in (("grpo", "GRPO"), ("rloo", "RLOO")):
        rows = [(arm, entry[f"minus_{ref}"]) for arm, entry in summary["arms"].items() if f"minus_{ref}" in entry]
        rows = [(arm, d) for arm, d in rows if arm != "base"]
        if not rows:
            continue
        lines += ["", f"{SECONDARY if 'seed_level' in summary else ''} Differences vs {name} (percentage points, "
                  "paired by seed and problem; seeds: those both arms have):".lstrip(), ""]  # fmt: skip
        lines.append("| arm | seeds | " + " | ".join(head) + " |")
        lines.append("|---|---|" + "---|" * len(head))
        for arm, diffs in rows:
            seeds = len(diffs.get("seeds", summary["arms"][arm]["seeds"]))
            lines.append(f"| {arm} | {seeds} | " + " | ".join(_cells(diffs, ks, "+.1f")) + " |")
    if "objectives" in summary:
        names = [f"{o['name']} ({', '.join(o['trained_by'])})" for o in summary["objectives"]]
        lines += ["", f"{SECONDARY if 'seed_level' in summary else ''} Each arm's training objective (preset@K, "
                  "trained by) evaluated on every model: its U-statistic over the n samples, in %, 95% CIs over seeds "
                  "and problems; then paired differences vs RLOO (exploratory point estimates).".lstrip(), ""]
        lines.append("| model | seeds | " + " | ".join(names) + " |")  # fmt: skip
        lines.append("|---|---|" + "---|" * len(names))
        for suffix, fmt in (("", ".1f"), ("minus_rloo", "+.1f")):
            for arm, entry in summary["arms"].items():
                cur = (entry.get(suffix, {}) if suffix else entry).get("objectives")
                if cur is None or suffix and arm == "base":
                    continue
                cells = [_cell(v, ci, fmt) for v, ci in zip(cur["value"], cur["ci"])]
                seeds = len((entry[suffix] if suffix else entry).get("seeds", entry["seeds"]))
                lines.append(f"| {arm}{' - rloo' if suffix else ''} | {seeds} | " + " | ".join(cells) + " |")
    if "group_weights" in summary:
        gw = summary["group_weights"]
        n = gw["num_generations"]
        lines += ["", f"Weight of a group with c successes of its {n} training rollouts (0/1 rewards), relative to the "
                  "arm's largest: the arms differ only in these (Adam divides a global scale out).", ""]  # fmt: skip
        lines.append("| arm | " + " | ".join(f"c={c}" for c in range(1, n)) + " |")
        lines.append("|---|" + "---|" * (n - 1))
        for arm, weights in gw["arms"].items():
            lines.append(f"| {arm} | " + " | ".join(f"{stable(w):.2f}" for w in weights[1:n]) + " |")
    return "\n".join(lines)
