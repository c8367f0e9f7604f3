"""The study drivers' unit records (`<assets>/<arm>-s<seed>.json`, `base.json`), read and checked in one place.

A record is written whole by `compare_objectives.run_unit` (temporary file, then rename), but folders are copied,
merged and edited by hand: a truncated file, a JSON list, a record missing `eval`, a seed written as "3", a folder
named like a record, or a record whose `unit` is not its file's name (the summary would drop one unit or count one
twice) each failed deep in a summary as a bare KeyError, TypeError or JSON error. `read_unit` checks what every
summary reads and raises `ValueError` naming the file and the field (the drivers print it as one line, exit 2).

The reports' shared bookkeeping lives here too, written once: a reproduction unit read against the committed unit it
reruns (`read_rerun`: its commit, training log and per-problem counts compared) and the units resumed after an
interruption (`resumed_units`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Rerun", "TRAIN_KEYS", "check_todo", "load_units", "log_history", "read_json", "read_rerun", "read_unit",
    "recorded_flags", "rerun_result", "resumed_units", "train_trace", "valid_units",
]  # fmt: skip

_NAME = re.compile(r"^([a-z][a-z0-9_]*)-s(\d+)$")


def read_json(path: Path, what: str = "unit record"):
    """The JSON in `path`; ValueError naming the file when it is no file, cannot be read, or is not JSON."""
    if not path.is_file():
        raise ValueError(f"{path}: not a file (a {what} is a .json file){'; it is a folder' if path.is_dir() else ''}")
    try:
        return json.loads(path.read_bytes())
    except OSError as err:
        raise ValueError(f"{path}: cannot read this {what} ({err.strerror or err})") from None
    except ValueError as err:  # JSONDecodeError, or bytes that are not UTF-8
        raise ValueError(f"{path}: not valid JSON ({' '.join(str(err).split())[:120]}): the {what} is cut short or "
                         "corrupt; delete it and rerun the unit") from None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_unit(path: Path, name_must_match: bool = True) -> dict:
    """The unit record in `path`, checked: a JSON object whose `unit` is the file's name (with `name_must_match`),
    `arm` and `seed` agreeing with it (`<arm>-s<seed>`, or `base` with seed null), an integer `num_samples` >= 1,
    an `eval` with `problem_ids`, `correct` and `scored` lists, `config` an object, `train_overrides` a list and
    `train_flags` (where recorded) a list of strings or null. ValueError naming the file and the field otherwise."""
    unit = read_json(path)

    def bad(field: str, want: str):
        shown = json.dumps(unit.get(field)) if field in unit else "missing"
        return ValueError(f"{path}: field {field!r} must be {want}, got {shown[:80]}; the unit record was edited or "
                          "is corrupt: delete it and rerun the unit")

    if not isinstance(unit, dict):
        raise ValueError(f"{path}: a unit record is a JSON object, got a JSON {type(unit).__name__}; delete it and "
                         "rerun the unit")
    name = unit.get("unit")
    if not isinstance(name, str) or not (name == "base" or _NAME.match(name)):
        raise bad("unit", "'base' or ARM-sSEED (e.g. max8-s3)")
    if name_must_match and name != path.stem:
        raise ValueError(f"{path}: its field 'unit' is {name!r} but the file is named {path.name}: a record is "
                         f"<unit>.json (rename the file to {name}.json, or rerun the unit)")
    arm, seed = ("base", None) if name == "base" else (_NAME.match(name)[1], int(_NAME.match(name)[2]))
    if unit.get("arm") != arm:
        raise bad("arm", f"{arm!r} (the unit's own name, {name})")
    if not (unit.get("seed") is None if seed is None else _is_int(unit.get("seed")) and unit["seed"] == seed):
        raise bad("seed", f"the integer {seed} (the unit's own name, {name})" if seed is not None else "null")
    if not _is_int(unit.get("num_samples")) or unit["num_samples"] < 1:
        raise bad("num_samples", "an integer >= 1")
    ev = unit.get("eval")
    if not isinstance(ev, dict) or not all(isinstance(ev.get(k), list) for k in ("problem_ids", "correct", "scored")):
        raise bad("eval", "an object with the lists problem_ids, correct and scored")
    if not all(_is_int(s) for s in ev["scored"]) or len(ev["scored"]) != len(ev["problem_ids"]):
        raise bad("eval", "an object whose scored holds one integer per problem")
    if not isinstance(unit.get("config", {}), dict):
        raise bad("config", "an object (the training config's settings)")
    if not isinstance(unit.get("train_overrides", []), list):
        raise bad("train_overrides", "a list of recipe flags")
    flags = unit.get("train_flags")
    if flags is not None and not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
        raise bad("train_flags", "a list of recipe flags (strings) or null")
    return unit


def load_units(assets: Path) -> dict[str, dict]:
    """Every unit record in `assets` (`*.json`, in name order) by unit name, each checked by `read_unit`."""
    return {path.stem: read_unit(path) for path in sorted(Path(assets).glob("*.json"))}


def valid_units(assets: Path):
    """The unit records in `assets` that `read_unit` accepts, in name order; the others are skipped."""
    for path in sorted(Path(assets).glob("*.json")) if Path(assets).is_dir() else []:
        try:
            yield read_unit(path)
        except ValueError:
            continue


def log_history(state_file: Path) -> list:
    """The `log_history` of a trained unit's `trainer_state.json`; ValueError naming the file if it is cut short or
    holds none (its model is then retrained once the folder is deleted)."""
    state = read_json(state_file, "trainer state")
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise ValueError(f"{state_file}: holds no log_history list; delete {state_file.parent} to retrain the unit")
    return history


def recorded_flags(assets: Path, num_generations: int, builtin: set[str],
                   check: Callable[[list[str], int], object]) -> dict[str, list[str]]:
    """The recipe flags (`train_flags`) of every arm not in `builtin` whose units in `assets` recorded them. A record
    is read back as a command to run, so it is input too: the flags are checked as `--arm` flags are, by `check(flags,
    num_generations)` (the driver passes `compare_summary.plan_of_flags`: the recipe's own parser into the plan they
    build), and must be the same in each of the arm's units; ValueError naming the file otherwise. A record that is
    not JSON is left to the summary, which names it."""
    out, source = {}, {}
    for path in sorted(Path(assets).glob("*.json")) if Path(assets).is_dir() else []:
        try:
            unit = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        flags = unit.get("train_flags") if isinstance(unit, dict) else None
        arm = unit.get("arm") if isinstance(unit, dict) else None
        if not isinstance(flags, list) or arm in builtin:
            continue
        if arm in out:
            if out[arm] != flags:
                raise ValueError(f"{path}: train_flags {flags} differ from those of arm {arm!r} in {source[arm].name} "
                                 f"({out[arm]}): one arm trains one way; delete the stale unit's record")
            continue
        try:
            check(flags, num_generations)
        except ValueError as err:
            raise ValueError(f"{path}: train_flags of arm {arm!r}: {err}") from None
        out[arm], source[arm] = flags, path
    return out


MAX_ATTEMPTS = 3  # a seed whose unit failed this often is reported as missing; the tests run on the complete seeds


def read_failures(path: Path) -> list[dict]:
    """A design's failed attempts (`<assets>_failures.json`: [{"unit", "error"}, ...]); [] when there is none."""
    if not path.exists():
        return []
    rows = read_json(path, "failures list")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("unit"), str) for r in rows):
        raise ValueError(f"{path}: expected a list of {{'unit': NAME, 'error': TEXT}}")
    return rows


def design_status(units: dict, arms, seeds, failures: list[dict]) -> dict:
    """The bookkeeping every pre-registered report states, for the units `<arm>-s<seed>` of `arms` x `seeds`:
    `expected` (unit names), `done` (the seeds with every arm in), `missing_seeds` (the seeds a unit failed
    `MAX_ATTEMPTS` times and is not in: the failure rule), `commits` (those the design's units ran at), `complete`
    (every seed done or missing) and `units` (the report's counts: expected, present, missing, outside the design)."""
    expected = [f"{arm}-s{s}" for s in seeds for arm in arms]
    attempts = {u: sum(r["unit"] == u for r in failures) for u in expected}
    gave_up = sorted({int(u.rsplit("-s", 1)[1]) for u, a in attempts.items() if a >= MAX_ATTEMPTS and u not in units})
    done = [s for s in seeds if all(f"{arm}-s{s}" in units for arm in arms)]
    return {"expected": expected, "done": done, "missing_seeds": gave_up,
            "commits": sorted({units[u].get("commit", "unknown") for u in units if u in expected}),
            "complete": all(s in done or s in gave_up for s in seeds),
            "units": {"expected": len(expected), "present": sum(u in units for u in expected),
                      "missing": [u for u in expected if u not in units],
                      "outside_the_design": sorted(u for u in units if u not in expected)}}  # fmt: skip


def resumed_units(units: dict, expected) -> list[str]:
    """The units resumed after an interruption: their model was trained in an earlier attempt, which the driver
    reuses (`train_wall_s` 0: the recorded attempt only evaluated)."""
    return sorted(u for u in expected if u in units and units[u].get("train_wall_s") == 0)


TRAIN_KEYS = ("reward", "loss")  # the per-step values of the training log a rerun must reproduce to the bit


def train_trace(unit: dict, keys=TRAIN_KEYS) -> list[list]:
    """A unit's training log as `[[value of each key] per step]` (empty when it logged none)."""
    return [[step.get(key) for key in keys] for step in unit.get("train_log") or []]


def rerun_result(original: dict, rerun: dict) -> dict:
    """A committed unit against its rerun: the number of problems whose correct count differs (None when they scored
    other problems) and "passed" only when none does. The one comparison every reproduction check makes."""
    a, b = original["eval"], rerun["eval"]
    same_problems = a["problem_ids"] == b["problem_ids"]
    differing = sum(x != y for x, y in zip(a["correct"], b["correct"])) if same_problems else None
    return {"status": "passed" if differing == 0 else "failed", "problems_differing": differing}


@dataclass(frozen=True)
class Rerun:
    """A reproduction unit (`read_rerun`): a committed unit (`original`) and its rerun (`rerun`), both records."""

    original: dict
    rerun: dict
    off_commit: bool  # the rerun ran at a commit its check does not take: the check is "not available"

    @property
    def commit(self):
        return self.rerun.get("commit")

    @property
    def same_training(self) -> bool:
        """Whether the rerun's training log equals the committed unit's on `TRAIN_KEYS`, step by step (False when
        the committed unit logged none)."""
        trace = train_trace(self.original)
        return bool(trace) and trace == train_trace(self.rerun)

    @property
    def counts(self) -> dict:
        """`rerun_result`: "passed" when every problem's correct count is the committed unit's."""
        return rerun_result(self.original, self.rerun)


def read_rerun(original: dict | None, path: Path, commits: list[str], rerun_at: str) -> Rerun | None:
    """The reproduction unit of the committed unit `original`: its rerun's record in `path` (checked by `read_unit`),
    or None when either is missing. `rerun_at` is the commit the rerun must have run at for the check to count:
    "design", one of `commits` (the design's: an earlier study's unit rerun with the design's code; any commit when
    `commits` is empty), or "later", none of them (a design unit rerun with later code); `off_commit` says otherwise."""
    if rerun_at not in ("design", "later"):
        raise ValueError(f"rerun_at must be 'design' or 'later', got {rerun_at!r}")
    if original is None or not path.exists():
        return None
    rerun = read_unit(path)
    commit = rerun.get("commit")
    off = bool(commits) and commit not in commits if rerun_at == "design" else commit in commits
    return Rerun(original, rerun, off)


def check_todo(todo: list[str], assets: Path, given: str) -> None:
    """ValueError when `todo` (the units to run, from the flag `given`) names a unit twice (two jobs would train it at
    once into one work folder), or when a unit's record already in `assets` (which counts as done) is not one."""
    twice = sorted({u for u in todo if todo.count(u) > 1})
    if twice:
        raise ValueError(f"{given} names {twice} more than once: each unit runs once, name it once")
    for done in (Path(assets) / f"{u}.json" for u in todo):
        if done.exists() or done.is_symlink():
            read_unit(done)
