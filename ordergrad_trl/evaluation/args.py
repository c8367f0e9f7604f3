"""The arguments of the four stages (`ordergrad-eval run|generate|score|report`) and their value checks.

Each dataclass is a TrlParser group: every field is a command-line flag and a key of a `--config` YAML file, and a
keyword of `ordergrad_trl.evaluation.evaluate`. `check_types` holds values that did not come through argparse (YAML,
Python) to the annotated types, so `datasets: arithmetic` (a string where a list belongs) or a NaN is refused rather
than coerced.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field

from ..tasks.sets import MATH_SETS
from .errors import UsageError
from .layout import REWARD_FIELDS

__all__ = [
    "BACKENDS",
    "GenerateArgs",
    "PathArgs",
    "ReportArgs",
    "ScoreArgs",
    "check_bounds",
    "check_reward_env",
    "check_types",
    "check_value",
    "validate_generate",
    "validate_score",
]

BACKENDS = ("auto", "hf", "vllm", "reference")

# Bounds of every numeric flag, {flag: (low, high)}, checked with the types (`check_types`) and quoted in --help:
# a value outside ends with one line and exit 2 before any work, not in a hang or traceback hours later. Each bound
# is far beyond any sensible run and below what the machinery can hold (int32 sizes, an hour's wait, memory).
SEEDS = (0, 2**32 - 1)
BOUNDS: dict[str, tuple[float, float]] = {
    "limit": (1, 2**31 - 1), "num_samples": (1, 65536), "temperature": (0, 100), "top_p": (1e-6, 1),
    "top_k": (0, 2**31 - 1), "max_new_tokens": (1, 2**20), "seed": SEEDS, "batch_size": (1, 65536),
    "data_parallel_size": (1, 1024), "tensor_parallel_size": (1, 1024), "gpu_memory_utilization": (1e-3, 1),
    "max_model_len": (1, 2**24), "vllm_chunk": (1, 2**20),
    "reward_timeout_s": (1e-3, 3600), "score_chunk": (1, 2**20),  # time-outs: math_verify_pool.check_timeout's
    "ks": (1, 65536), "bootstrap_samples": (1, 10000), "bootstrap_seed": SEEDS, "ci_level": (1e-6, 1 - 1e-6),
    "cvar_q": (1e-6, 1),
}
MIN_TEMPERATURE = 1e-3  # a positive temperature below this divides the logits into inf / NaN: 0 means greedy
MAX_REWARD_WEIGHT = 1e6  # |weight|; nonzero ones at least 1/MAX_REWARD_WEIGHT: no sum of weighted rewards overflows


def _h(name: str, text: str) -> dict:
    """Help metadata of field `name`: `text` and its bounds."""
    low, high = BOUNDS[name]
    return {"help": f"{text} In [{low:g}, {high:g}]."}


def _datasets_help() -> str:
    """`--datasets`' help, from the registry of math sets: every set a name reaches, then files."""
    hub = [name for name, spec in MATH_SETS.items() if spec.generator is None]
    built = [name for name, spec in MATH_SETS.items() if spec.generator is not None]
    return (f"Benchmarks: {', '.join(hub)}, {' and '.join(built)} (built in), or paths to .jsonl/.json/.parquet "
            "files.")


def _protocol_help() -> str:
    """`--protocol`'s help, from the registry of named protocols."""
    from .protocols import PRESET_FIELDS, PROTOCOLS

    return (f"Named evaluation protocol, one of {', '.join(PROTOCOLS)}: sets {', '.join(PRESET_FIELDS)} as published "
            "(docs/evaluation.md cites each value); any of these flags given overrides its preset value.")


@dataclass
class PathArgs:
    """Arguments every stage takes."""

    output_dir: str = field(
        default="eval_out",
        metadata={"help": "Directory of the run (generations, scores, report); relative to the current directory."},
    )
    disable_tqdm: bool = field(
        default=False, metadata={"help": "No progress bars (they are also off when stderr is not a terminal)."}
    )


@dataclass
class GenerateArgs:
    model: str | None = field(
        default=None,
        metadata={"help": "Hub id, local checkpoint directory, or PEFT adapter directory (adapter_config.json: the "
                          "base is loaded and the adapter merged). Default: SmolLM2-135M-Instruct (offline copy "
                          "when the Hub is unreachable)."},
    )
    datasets: list[str] = field(
        default_factory=lambda: ["math500"],
        metadata={"help": _datasets_help()},
    )
    split: str = field(default="test", metadata={"help": "Split to evaluate."})
    local_data: bool = field(
        default=False,
        metadata={"help": "Read registered benchmarks from the local files ($ORDERGRAD_SHARED_DATA or "
                          "../shared/data) instead of the Hub."},
    )
    data_dir: str | None = field(default=None, metadata={"help": "Directory of the local benchmark files."})
    limit: int | None = field(default=None, metadata=_h("limit", "Evaluate only the first `limit` problems of each "
                                                                   "set."))
    num_samples: int = field(default=8, metadata=_h("num_samples", "Samples n per problem."))
    temperature: float = field(default=1.0, metadata=_h("temperature", "Sampling temperature: 0 = greedy, else at "
                                                        f"least {MIN_TEMPERATURE:g}. Default 1.0 is TRL's training "
                                                        "temperature."))
    top_p: float = field(default=1.0, metadata=_h("top_p", "Nucleus sampling threshold (1.0 = off)."))
    top_k: int = field(default=0, metadata=_h("top_k", "Top-k sampling (0 = off)."))
    max_new_tokens: int = field(default=1024, metadata=_h("max_new_tokens", "Maximum completion length in tokens."))
    seed: int = field(default=0, metadata=_h("seed", "Sampling seed."))
    protocol: str | None = field(default=None, metadata={"help": _protocol_help()})
    system_prompt: str | None = field(
        default=None, metadata={"help": "Optional system message (with --use_chat_template false: a plain-text "
                                        "prefix, a blank line before the user message)."}
    )
    user_template: str | None = field(
        default=None, metadata={"help": "User message with a {question} placeholder (default: the training one)."}
    )
    use_chat_template: bool = field(
        default=True, metadata={"help": "Format prompts with the tokenizer's chat template (an error if it has "
                                        "none); false: plain text, the system prompt (if any) then the user message."}
    )
    backend: str = field(default="auto", metadata={"help": "auto (vllm if installed with a GPU, else hf), hf, "
                                                           "vllm, or reference (no model: each problem's reference "
                                                           "solution, else its gold answer in \\boxed{})."})
    batch_size: int = field(default=32, metadata=_h("batch_size", "hf backend: sequences per generate call."))
    dtype: str = field(default="auto", metadata={"help": "auto (bfloat16 on GPU, float32 on CPU), float32, "
                                                         "bfloat16, float16."})
    data_parallel_size: int | None = field(
        default=None, metadata=_h("data_parallel_size", "Worker processes, each on its own tensor_parallel_size "
                                  "visible GPUs (default: visible GPUs / tensor_parallel_size, at least 1).")
    )
    tensor_parallel_size: int = field(default=1, metadata=_h("tensor_parallel_size", "vllm: GPUs per worker."))
    gpu_memory_utilization: float = field(default=0.9, metadata=_h("gpu_memory_utilization",
                                                                     "vllm: fraction of GPU memory to use."))
    max_model_len: int | None = field(default=None, metadata=_h("max_model_len",
                                                                  "vllm: context length (default: model's)."))
    vllm_chunk: int = field(default=2048, metadata=_h("vllm_chunk", "vllm: requests per call (results are saved "
                                                                       "per call)."))
    overwrite: bool = field(
        default=False, metadata={"help": "If --output_dir holds a run whose provenance differs (other model, data, "
                                         "prompt or sampling settings), move it aside to <output_dir>.replaced-<time> "
                                         "and start afresh, instead of refusing."}
    )


@dataclass
class ScoreArgs:
    reward_timeout_s: float = field(
        default=10.0, metadata=_h("reward_timeout_s", "Hard wall-clock bound in seconds per scored sample, and "
                                  "per gold parse (a slower sample scores 0 and is counted as a time-out, a slower "
                                  "gold leaves the problem unscorable), as in training; math-verify's own time-outs "
                                  "are whole seconds.")
    )
    reward_workers: int | None = field(
        default=None, metadata={"help": "math-verify worker processes (default: as in training, min(4, cpus)); at "
                                        "most 4 x the CPUs."}
    )
    score_chunk: int = field(default=512, metadata=_h("score_chunk", "Samples scored per call; scores are saved "
                                                                       "per chunk."))



@dataclass
class ReportArgs:
    ks: list[int] | None = field(
        default=None, metadata={"help": "k values for the @k metrics, each in [1, n] (default: the powers of two "
                                        "up to n: 1, 2, 4, ...)."}
    )
    reward_weights: str = field(
        default="correct=1",
        metadata={"help": "Reward for best@k / worst@k / CVaR / objectives: weighted sum of score fields, e.g. "
                          f"'correct=1,format=0.2' (fields: {', '.join(REWARD_FIELDS)}); each weight 0 or of magnitude "
                          f"in [{1 / MAX_REWARD_WEIGHT:g}, {MAX_REWARD_WEIGHT:g}], not all 0."},
    )
    cvar_q: float = field(default=0.25, metadata=_h("cvar_q", "q of cvar<q>@k: mean of the ceil(q k) worst of k."))
    objectives: list[str] = field(
        default_factory=list,
        metadata={"help": "Extra L-statistic objectives as Preset@K, e.g. TopM:2@4 Median@8 '0.1,0,0.3,0.6@4'; K "
                          f"in [1, n] and at most {BOUNDS['ks'][1]}."},
    )
    bootstrap_samples: int = field(default=1000, metadata=_h("bootstrap_samples", "Bootstrap replicates for the "
                                                                                   "CIs."))
    bootstrap_seed: int = field(default=0, metadata=_h("bootstrap_seed", "Seed of the bootstrap resampling."))
    ci_level: float = field(default=0.95, metadata=_h("ci_level", "Confidence level of the intervals."))
    breakdown: list[str] = field(
        default_factory=lambda: ["subject", "level"],
        metadata={"help": "Problem metadata fields to break results down by (where present)."},
    )
    plot: bool = field(default=True, metadata={"help": "Write passk.png (needs matplotlib; skipped otherwise)."})


def _fits(value, annotation) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in typing.get_args(annotation))
    if origin is list:
        (item,) = typing.get_args(annotation)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, annotation)


def _spelled(annotation) -> str:
    if annotation is float:
        return "a finite number"
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "").replace("NoneType", "None")


@functools.cache
def _type_hints(cls) -> dict:
    """A dataclass's resolved annotations, once per class (resolving them is ~1 ms, and every field asks)."""
    return typing.get_type_hints(cls)


def check_value(cls, name: str, value, where: str = "") -> None:
    """UsageError naming `--name` unless `value` has the type field `name` of dataclass `cls` is annotated with."""
    annotation = _type_hints(cls)[name]
    if not _fits(value, annotation):
        hint = " (a YAML list: [a, b])" if "list" in str(annotation) else ""
        raise UsageError(f"{where}--{name} must be {_spelled(annotation)}{hint}, got {type(value).__name__} "
                         f"{value!r}")


def check_types(args, where: str = "") -> None:
    """UsageError naming the field unless every value has its annotated type (floats finite, lists lists) and
    lies within its `BOUNDS`."""
    for f in dataclasses.fields(args):
        check_value(type(args), f.name, getattr(args, f.name), where)
    check_bounds(args, where)


def check_bounds(args, where: str = "") -> None:
    """UsageError naming `--flag`, its bounds and the value, for the first value outside `BOUNDS` (and the
    worker count and temperature, whose bounds are not a plain range; the report's weights and objectives are
    bounded where they are parsed, `report_plan`)."""
    for f in dataclasses.fields(args):
        value = getattr(args, f.name)
        if f.name not in BOUNDS or value is None:
            continue
        low, high = BOUNDS[f.name]
        for v in value if isinstance(value, list) else [value]:
            if not low <= v <= high:
                raise UsageError(f"{where}--{f.name} must be in [{low:g}, {high:g}], got {v!r}")
    temperature = getattr(args, "temperature", None)
    if temperature is not None and 0 < temperature < MIN_TEMPERATURE:
        raise UsageError(f"{where}--temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, got "
                         f"{temperature!r}: dividing the logits by it overflows")
    if getattr(args, "reward_workers", None) is not None:
        from ordergrad_trl.tasks.reward_settings import check_workers

        try:
            check_workers(args.reward_workers, "--reward_workers")
        except ValueError as err:
            raise UsageError(f"{where}{err}") from None


def validate_generate(args: GenerateArgs) -> None:
    """Flag-level checks of the generate stage, before any data or weights load."""
    check_types(args)
    from .protocols import check_protocol

    check_protocol(args.protocol)
    if args.backend not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, got {args.backend!r}")
    checks = [
        ("num_samples", args.num_samples >= 1, ">= 1"),
        ("max_new_tokens", args.max_new_tokens >= 1, ">= 1"),
        ("batch_size", args.batch_size >= 1, ">= 1"),
        ("temperature", args.temperature >= 0, ">= 0"),
        ("top_p", 0 < args.top_p <= 1, "in (0, 1]"),
        ("top_k", args.top_k >= 0, ">= 0"),
        ("limit", args.limit is None or args.limit >= 1, ">= 1"),
        ("tensor_parallel_size", args.tensor_parallel_size >= 1, ">= 1"),
        ("data_parallel_size", args.data_parallel_size is None or args.data_parallel_size >= 1, ">= 1"),
        ("gpu_memory_utilization", 0 < args.gpu_memory_utilization <= 1, "in (0, 1]"),
        ("vllm_chunk", args.vllm_chunk >= 1, ">= 1"),
    ]
    for name, ok, rule in checks:
        if not ok:
            raise UsageError(f"--{name} must be {rule}, got {getattr(args, name)!r}")
    if args.dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise UsageError(f"--dtype must be one of auto, float32, bfloat16, float16, got {args.dtype!r}")
    if not args.datasets:
        raise UsageError("--datasets must name at least one benchmark")
    if not args.split:
        raise UsageError("--split must not be empty")
    if args.data_dir is not None and not args.local_data:
        raise UsageError(f"--data_dir {args.data_dir} is read only with --local_data (else the Hub); add --local_data")
    if args.model is not None and not args.model.strip():
        raise UsageError("--model must not be empty (leave it out for the default model)")
    if args.user_template is not None and "{question}" not in args.user_template:
        raise UsageError(f"--user_template must contain '{{question}}', got {args.user_template!r}")


def check_reward_env() -> None:
    """UsageError (one line, exit 2) naming a malformed or out-of-bounds $ORDERGRAD_REWARD_TIMEOUT_S,
    $ORDERGRAD_REWARD_WORKERS or $LOCAL_WORLD_SIZE, which the scorer would otherwise raise mid-run."""
    try:
        from ordergrad_trl.tasks.math_verify_pool import (
            reward_env_settings,  # checks them on import, too
        )

        reward_env_settings()
    except ValueError as err:
        raise UsageError(str(err)) from None


def validate_score(args: ScoreArgs) -> None:
    check_reward_env()
    check_types(args)
    for name, ok, rule in [("reward_timeout_s", args.reward_timeout_s > 0, "> 0"),
                           ("reward_workers", args.reward_workers is None or args.reward_workers >= 1, ">= 1"),
                           ("score_chunk", args.score_chunk >= 1, ">= 1")]:
        if not ok:
            raise UsageError(f"--{name} must be {rule}, got {getattr(args, name)!r}")
