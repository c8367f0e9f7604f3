"""Stage 1: sample n completions per problem and append them to JSONL, resuming where an earlier run stopped.

    python -m eval.generate --model <hub id | checkpoint dir | adapter dir> --datasets gsm8k arithmetic \\
        --local_data --limit 32 --num_samples 8 --max_new_tokens 256 --output_dir runs/smollm2

Backends: `vllm` (when installed and a GPU is present; the default then), `hf` (batched `transformers` generate
on CPU or GPU) and `reference` (each problem's reference solution as every sample: a check that extraction and
scoring give 100%, no model needed). `--data_parallel_size D` runs D worker processes, each on its own GPU(s),
on disjoint shares of the pending samples.

Resume: samples already in `<output_dir>/<dataset>/generations*.jsonl` are not generated again; raising
`--num_samples` or `--limit` on a rerun adds only the missing samples. Settings that change the distribution
(model, temperature, top_p, top_k, max_new_tokens, prompt format) must match the earlier run (ValueError otherwise).
Seeds: vLLM seeds every sample from (seed, dataset, problem id, sample index); the hf backend seeds every batch
from its first sample, so a rerun with the same batch size reproduces the same samples.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import json
import logging
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as `python eval/generate.py`: import the sibling modules as package `eval`
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    __package__ = "eval"

from eval import parallel, records  # noqa: E402
from eval.backends import HFBackend, VLLMBackend, prompt_ids  # noqa: E402
from eval.cli import MissingPathError, UsageError, cli, progress, run_dir  # noqa: E402
from eval.modeling import load_tokenizer, materialize_for_vllm, resolve_model  # noqa: E402

logger = logging.getLogger("eval.generate")

BACKENDS = ("auto", "hf", "vllm", "reference")
_DIST_FIELDS = ("model", "base", "adapter", "temperature", "top_p", "top_k", "max_new_tokens", "system_prompt",
                "user_template", "use_chat_template")


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
        metadata={"help": "Benchmarks: math500, gsm8k, aime24, aime25, amc23, minerva, olympiadbench, arithmetic "
                          "(built in), or paths to .jsonl/.json/.parquet files."},
    )
    split: str = field(default="test", metadata={"help": "Split to evaluate."})
    local_data: bool = field(
        default=False,
        metadata={"help": "Read registered benchmarks from the local files ($ORDERGRAD_SHARED_DATA or "
                          "../shared/data) instead of the Hub."},
    )
    data_dir: str | None = field(default=None, metadata={"help": "Directory of the local benchmark files."})
    limit: int | None = field(default=None, metadata={"help": "Evaluate only the first `limit` problems of each set."})
    num_samples: int = field(default=8, metadata={"help": "Samples n per problem."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (0 = greedy). Default 1.0 is "
                                                              "TRL's training temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling threshold (1.0 = off)."})
    top_k: int = field(default=0, metadata={"help": "Top-k sampling (0 = off)."})
    max_new_tokens: int = field(default=1024, metadata={"help": "Maximum completion length in tokens."})
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
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
    batch_size: int = field(default=32, metadata={"help": "hf backend: sequences per generate call."})
    dtype: str = field(default="auto", metadata={"help": "auto (bfloat16 on GPU, float32 on CPU), float32, "
                                                         "bfloat16, float16."})
    data_parallel_size: int | None = field(
        default=None, metadata={"help": "Worker processes, each on its own tensor_parallel_size visible GPUs "
                                        "(default: visible GPUs / tensor_parallel_size, at least 1)."}
    )
    tensor_parallel_size: int = field(default=1, metadata={"help": "vllm: GPUs per worker."})
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "vllm: fraction of GPU memory to use."})
    max_model_len: int | None = field(default=None, metadata={"help": "vllm: context length (default: model's)."})
    vllm_chunk: int = field(default=2048, metadata={"help": "vllm: requests per call (results are saved per call)."})


def _validate(args: GenerateArgs) -> None:
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
        ("vllm_chunk", args.vllm_chunk >= 1, ">= 1"),
    ]
    for name, ok, rule in checks:
        if not ok:
            raise UsageError(f"--{name} must be {rule}, got {getattr(args, name)!r}")
    if not args.datasets:
        raise UsageError("--datasets must name at least one benchmark")
    if args.user_template is not None and "{question}" not in args.user_template:
        raise UsageError(f"--user_template must contain '{{question}}', got {args.user_template!r}")
    for name in args.datasets:
        dataset_key(name)


def resolve_backend(backend: str) -> str:
    if backend != "auto":
        if backend == "vllm" and importlib.util.find_spec("vllm") is None:
            raise UsageError("--backend vllm, but vllm is not installed (pip install vllm); or use --backend hf")
        return backend
    return "vllm" if importlib.util.find_spec("vllm") is not None and parallel.gpu_count() > 0 else "hf"


def dataset_key(name: str) -> str:
    """Directory name of a benchmark: its registry name, or the file stem for a path."""
    from ordergrad_trl.tasks.data import get_math_set

    path = Path(name).expanduser()
    if path.suffix in (".jsonl", ".json", ".parquet"):
        if not path.is_file():
            raise UsageError(f"--datasets {name}: file not found (relative to {Path.cwd()})")
        return path.stem
    if path.is_file():
        return path.stem
    try:
        return get_math_set(name).name
    except ValueError as err:
        raise UsageError(f"--datasets {name}: {err}") from None


def load_problems(name: str, args: GenerateArgs, keep_solution: bool = False) -> list[dict]:
    """Problems of one benchmark as plain dicts (prompt messages, gold answer, id, metadata).

    `keep_solution`: add `solution`, the set's worked reference solution or, for sets without one (AIME, AMC,
    OlympiadBench, custom files), the gold answer in `\\boxed{}`: what `--backend reference` writes.
    """
    from ordergrad_trl.tasks.data import REFERENCE_SOLUTION_SETS, load_math_dataset

    worked = keep_solution and dataset_key(name) in REFERENCE_SOLUTION_SETS
    try:
        ds = load_math_dataset(
            name,
            args.split,
            local=args.local_data or None,
            data_dir=args.data_dir,
            system_prompt=args.system_prompt,
            user_template=args.user_template,  # None: the set's default
            keep_solution=worked,
        )
    except FileNotFoundError as err:  # a local benchmark file: say which flags point there
        raise MissingPathError(f"--datasets {name} with --local_data / --data_dir: {err}") from None
    if args.limit is not None:
        ds = ds.select(range(min(args.limit, len(ds))))
    rows = ds.to_list()
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"dataset {name!r} has duplicate problem ids; results are keyed by id")
    if keep_solution and not worked:
        for r in rows:
            r["solution"] = f"The final answer is $\\boxed{{{r['answer']}}}$."
    return rows


def _check_config(output_dir: Path, config: dict) -> None:
    """Refuse to mix samples drawn under different settings in one run directory."""
    path = output_dir / "generation_config.json"
    if path.is_file():
        old = json.loads(path.read_text())
        diff = {k: (old.get(k), config.get(k)) for k in _DIST_FIELDS if old.get(k) != config.get(k)}
        if diff:
            raise ValueError(
                f"{output_dir} holds samples generated with other settings {diff} (old, new); use a new "
                "--output_dir or the same settings to resume"
            )
    records.write_json_atomic(path, config)


def _merge_problems(path: Path, rows: list[dict]) -> None:
    """problems.jsonl = earlier problems (kept, so a smaller --limit never orphans samples) + new ones."""
    old = records.read_jsonl(path)
    seen = {r["id"] for r in old}
    fresh = [{k: v for k, v in r.items() if k != "solution"} for r in rows if r["id"] not in seen]
    records.write_jsonl_atomic(path, old + fresh)


def _sample_seed(seed: int, key: str, pid: str, sample: int) -> int:
    return zlib.crc32(f"{seed}:{key}:{pid}:{sample}".encode()) & 0x7FFFFFFF


# ------------------------------------------------------------------------------------------------- driver
def _pending(key_dir: Path, problems: list[dict], n: int) -> list[tuple[int, int]]:
    done = records.read_samples(key_dir)
    return [(i, s) for i, p in enumerate(problems) for s in range(n) if (p["id"], s) not in done]


def _run_units(backend, key: str, problems: list[dict], units, out_file: Path, args, bar_opts: dict) -> dict:
    """Generate `units` [(problem index, sample)] of one dataset, appending each finished batch to out_file."""
    records.repair_tail(out_file)
    cache: dict[int, list[int]] = {}
    prompts = []
    for i, _ in units:
        if i not in cache:
            cache[i] = prompt_ids(backend.tok, problems[i], args.use_chat_template)
        prompts.append(cache[i])
    seeds = [_sample_seed(args.seed, key, problems[i]["id"], s) for i, s in units]
    left = collections.Counter(i for i, _ in units)  # samples still to come per problem
    bar = progress(len(units), f"generate {key}", "sample", **bar_opts)
    t0, tokens, done, problems_done = time.perf_counter(), 0, 0, 0
    for start, results in backend.generate(prompts, seeds):
        rows = []
        for (i, s), (text, count, finish) in zip(units[start : start + len(results)], results):
            rows.append({"id": problems[i]["id"], "sample": s, "completion": text, "num_tokens": count,
                         "finish_reason": finish})
            tokens += count
            left[i] -= 1
            problems_done += left[i] == 0
        records.append_jsonl(out_file, rows)
        done += len(rows)
        rate = tokens / max(time.perf_counter() - t0, 1e-9)
        bar.set_postfix_str(f"problems {problems_done}/{len(left)}, {rate:.0f} tok/s", refresh=False)
        bar.update(len(rows))
        logger.info("%s: %d/%d samples, %d/%d problems, %.1f tok/s", key, done, len(units), problems_done,
                    len(left), rate)
    bar.close()
    return {"samples": done, "tokens": tokens, "seconds": time.perf_counter() - t0}


def _reference_units(key_dir: Path, problems: list[dict], units) -> dict:
    out = key_dir / "generations.jsonl"
    records.repair_tail(out)
    rows = [{"id": problems[i]["id"], "sample": s, "completion": problems[i]["solution"], "num_tokens": None,
             "finish_reason": "reference"} for i, s in units]
    records.append_jsonl(out, rows)
    return {"samples": len(rows), "tokens": 0, "seconds": 0.0}


def generate(args: GenerateArgs, paths: PathArgs) -> dict:
    """Generate every missing sample of every dataset; returns throughput stats {dataset: {...}}."""
    # 1. everything that can be checked without data or weights
    _validate(args)
    backend_name = resolve_backend(args.backend)
    groups = [None]
    if backend_name != "reference":
        devices = parallel.visible_devices()
        dp = args.data_parallel_size or max(1, len(devices) // args.tensor_parallel_size)
        groups = parallel.worker_devices(dp, args.tensor_parallel_size, devices)
    out = run_dir(paths.output_dir)
    source = resolve_model(args.model) if backend_name != "reference" else None
    if source is not None:
        args = dataclasses.replace(args, model=source.model)  # workers must not resolve the default again
    config = {
        **(source.describe() if source else {"model": "reference", "base": None, "adapter": None}),
        **{k: getattr(args, k) for k in _DIST_FIELDS if hasattr(args, k) and k != "model"},
    }
    if args.temperature == 0 and args.num_samples > 1:
        logger.warning("temperature=0 (greedy) with num_samples=%d: all samples of a problem will be equal",
                       args.num_samples)
    # 2. problems, and the prompts rendered once with the tokenizer: template errors before any weights load
    problems_of = {dataset_key(name): load_problems(name, args, keep_solution=backend_name == "reference")
                   for name in args.datasets}
    if source is not None:
        tok = load_tokenizer(source)
        for problems in problems_of.values():
            if problems:
                prompt_ids(tok, problems[0], args.use_chat_template)
    out.mkdir(parents=True, exist_ok=True)
    _check_config(out, config)
    work = {}
    for key, problems in problems_of.items():
        key_dir = out / key
        key_dir.mkdir(exist_ok=True)
        _merge_problems(key_dir / "problems.jsonl", problems)
        work[key] = (problems, _pending(key_dir, problems, args.num_samples))
    total = sum(len(u) for _, u in work.values())
    logger.info("backend=%s, %d samples to generate (%s)", backend_name, total,
                ", ".join(f"{k}: {len(u)}" for k, (_, u) in work.items()))
    # 3. generate: here, or in one worker process per GPU group
    if total == 0:
        return {}
    if backend_name == "reference":
        return {k: _reference_units(out / k, p, u) for k, (p, u) in work.items()}
    if len(groups) > 1:
        if backend_name == "vllm":
            materialize_for_vllm(source, out)  # merge an adapter once, not in every worker
        return parallel.launch_workers(args, out, backend_name, work, groups, paths.disable_tqdm)
    return generate_local(args, out, backend_name, source, work, "generations.jsonl", disable_tqdm=paths.disable_tqdm)


def generate_local(args, out: Path, backend_name: str, source, work, file_name: str, rank: int = 0,
                   disable_tqdm: bool = False) -> dict:
    """Generate `work` {dataset: (problems, units)} in this process, appending to `<dataset>/<file_name>`."""
    backend = VLLMBackend(source, args, out) if backend_name == "vllm" else HFBackend(source, args)
    bar_opts = dict(disable=disable_tqdm, position=rank, leave=rank == 0)
    return {key: _run_units(backend, key, problems, units, out / key / file_name, args, bar_opts)
            for key, (problems, units) in work.items() if units}


def _main(argv: list[str] | None) -> dict:
    from trl import TrlParser

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--dp_worker"]:
        parallel.run_worker(argv[1])
        return {}
    gen_args, paths = TrlParser((GenerateArgs, PathArgs)).parse_args_and_config(argv)
    stats = generate(gen_args, paths)
    print(json.dumps(stats, indent=2))
    return stats


def main(argv: list[str] | None = None) -> dict:
    return cli(_main, "eval.generate", argv)


if __name__ == "__main__":
    main()
