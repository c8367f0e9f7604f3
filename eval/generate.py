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

import dataclasses
import importlib.util
import json
import logging
import os
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as `python eval/generate.py`: import the sibling modules as package `eval`
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    __package__ = "eval"

from eval import records  # noqa: E402
from eval.modeling import load_model_and_tokenizer, load_tokenizer, materialize_for_vllm, resolve_model  # noqa: E402

logger = logging.getLogger("eval.generate")

BACKENDS = ("auto", "hf", "vllm", "reference")
_DIST_FIELDS = ("model", "base", "adapter", "temperature", "top_p", "top_k", "max_new_tokens", "system_prompt",
                "user_template", "use_chat_template")


@dataclass
class PathArgs:
    output_dir: str = field(
        default="eval_out", metadata={"help": "Directory of the run (generations, scores, report)."}
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
    system_prompt: str | None = field(default=None, metadata={"help": "Optional system message."})
    user_template: str | None = field(
        default=None, metadata={"help": "User message with a {question} placeholder (default: the training one)."}
    )
    use_chat_template: bool = field(
        default=True, metadata={"help": "Format prompts with the tokenizer's chat template (else the user message "
                                        "text alone)."}
    )
    backend: str = field(default="auto", metadata={"help": "auto (vllm if installed with a GPU, else hf), hf, "
                                                           "vllm, or reference."})
    batch_size: int = field(default=32, metadata={"help": "hf backend: sequences per generate call."})
    dtype: str = field(default="auto", metadata={"help": "auto (bfloat16 on GPU, float32 on CPU), float32, "
                                                         "bfloat16, float16."})
    data_parallel_size: int | None = field(
        default=None, metadata={"help": "Worker processes (default: GPUs / tensor_parallel_size, at least 1)."}
    )
    tensor_parallel_size: int = field(default=1, metadata={"help": "vllm: GPUs per worker."})
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "vllm: fraction of GPU memory to use."})
    max_model_len: int | None = field(default=None, metadata={"help": "vllm: context length (default: model's)."})
    vllm_chunk: int = field(default=2048, metadata={"help": "vllm: requests per call (results are saved per call)."})


def _validate(args: GenerateArgs) -> None:
    if args.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {args.backend!r}")
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
    ]
    for name, ok, rule in checks:
        if not ok:
            raise ValueError(f"{name} must be {rule}, got {getattr(args, name)!r}")
    if not args.datasets:
        raise ValueError("datasets must name at least one benchmark")
    if args.user_template is not None and "{question}" not in args.user_template:
        raise ValueError(f"user_template must contain '{{question}}', got {args.user_template!r}")


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # a broken CUDA setup must not stop CPU evaluation
        return 0


def resolve_backend(backend: str) -> str:
    if backend != "auto":
        if backend == "vllm" and importlib.util.find_spec("vllm") is None:
            raise ValueError("backend='vllm' but vllm is not installed (pip install vllm), or use --backend hf")
        return backend
    return "vllm" if importlib.util.find_spec("vllm") is not None and _gpu_count() > 0 else "hf"


def dataset_key(name: str) -> str:
    """Directory name of a benchmark: its registry name, or the file stem for a path."""
    from ordergrad_trl.data import get_math_set

    path = Path(name).expanduser()
    if path.suffix in (".jsonl", ".json", ".parquet") or path.is_file():
        return path.stem
    return get_math_set(name).name


def load_problems(name: str, args: GenerateArgs, keep_solution: bool = False) -> list[dict]:
    """Problems of one benchmark as plain dicts (prompt messages, gold answer, id, metadata)."""
    from ordergrad_trl.data import DEFAULT_USER_TEMPLATE, load_math_dataset

    ds = load_math_dataset(
        name,
        args.split,
        local=args.local_data or None,
        data_dir=args.data_dir,
        system_prompt=args.system_prompt,
        user_template=args.user_template or DEFAULT_USER_TEMPLATE,
        keep_solution=keep_solution,
    )
    if args.limit is not None:
        ds = ds.select(range(min(args.limit, len(ds))))
    rows = ds.to_list()
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"dataset {name!r} has duplicate problem ids; results are keyed by id")
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


# ------------------------------------------------------------------------------------------------- backends
class HFBackend:
    """Batched `transformers` generate; rows are ChatML-templated token ids, left-padded."""

    def __init__(self, source, args: GenerateArgs):
        from transformers import GenerationConfig

        self.model, self.tok = load_model_and_tokenizer(source, args.dtype)
        eos = self.model.generation_config.eos_token_id
        eos = list(eos) if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else [])
        if self.tok.eos_token_id is not None and self.tok.eos_token_id not in eos:
            eos.append(self.tok.eos_token_id)
        self.eos = set(eos)
        sampling = args.temperature > 0
        # A fresh config: model-specific defaults (top_k=50, repetition penalty, ...) must not leak into the
        # distribution, so both backends sample from exactly temperature/top_p/top_k.
        self.gen_config = GenerationConfig(
            do_sample=sampling,
            temperature=args.temperature if sampling else None,
            top_p=args.top_p if sampling else None,
            top_k=args.top_k if sampling else None,
            repetition_penalty=1.0,
            max_new_tokens=args.max_new_tokens,
            eos_token_id=eos,
            pad_token_id=self.tok.pad_token_id,
        )
        self.model.generation_config = self.gen_config
        self.batch_size = args.batch_size

    def generate(self, prompt_ids: list[list[int]], seeds: list[int]):
        """Yields (start index, [(text, num_tokens, finish_reason), ...]) per batch."""
        import torch

        device = self.model.device
        for start in range(0, len(prompt_ids), self.batch_size):
            batch = prompt_ids[start : start + self.batch_size]
            enc = self.tok.pad({"input_ids": batch}, return_tensors="pt", padding=True).to(device)
            torch.manual_seed(seeds[start])
            with torch.inference_mode():
                out = self.model.generate(**enc, generation_config=self.gen_config)
            gen = out[:, enc["input_ids"].shape[1] :].tolist()  # (B, T)
            results = []
            for row in gen:
                stop = next((i for i, t in enumerate(row) if t in self.eos), None)
                count = len(row) if stop is None else stop + 1  # the stop token counts, padding after it not
                text = self.tok.decode(row[:count], skip_special_tokens=True)
                results.append((text, count, "length" if stop is None else "stop"))
            yield start, results


class VLLMBackend:
    """vLLM offline inference; every request carries its own seed, so samples do not depend on batching."""

    def __init__(self, source, args: GenerateArgs, output_dir: Path):
        from vllm import LLM

        path = materialize_for_vllm(source, output_dir)
        self.tok = load_tokenizer(source)
        self.llm = LLM(
            model=path,
            tokenizer=source.tokenizer if source.adapter is None else path,
            dtype="auto" if args.dtype == "auto" else args.dtype,
            seed=args.seed,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=args.max_model_len,
            enable_prefix_caching=True,  # the n samples of a problem share its prompt
        )
        self.args = args

    def generate(self, prompt_ids: list[list[int]], seeds: list[int]):
        from vllm import SamplingParams

        a = self.args
        for start in range(0, len(prompt_ids), a.vllm_chunk):
            ids = prompt_ids[start : start + a.vllm_chunk]
            params = [
                SamplingParams(
                    n=1, temperature=a.temperature, top_p=a.top_p, top_k=a.top_k if a.top_k > 0 else -1,
                    max_tokens=a.max_new_tokens, seed=s,
                )
                for s in seeds[start : start + a.vllm_chunk]
            ]
            outs = self.llm.generate([{"prompt_token_ids": p} for p in ids], params, use_tqdm=False)
            yield start, [
                (o.outputs[0].text, len(o.outputs[0].token_ids), o.outputs[0].finish_reason) for o in outs
            ]


# ------------------------------------------------------------------------------------------------- driver
def _prompt_ids(tok, problem: dict, use_chat_template: bool) -> list[int]:
    if use_chat_template:
        if not getattr(tok, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; pass --use_chat_template false to send the user "
                             "message text alone")
        text = tok.apply_chat_template(problem["prompt"], add_generation_prompt=True, tokenize=False)
        return tok(text, add_special_tokens=False)["input_ids"]
    return tok(problem["prompt"][-1]["content"])["input_ids"]


def _pending(key_dir: Path, problems: list[dict], n: int) -> list[tuple[int, int]]:
    done = records.read_samples(key_dir)
    return [(i, s) for i, p in enumerate(problems) for s in range(n) if (p["id"], s) not in done]


def _run_units(backend, tok, key: str, problems: list[dict], units, out_file: Path, args: GenerateArgs) -> dict:
    """Generate `units` [(problem index, sample)] of one dataset, appending each finished batch to out_file."""
    records.repair_tail(out_file)
    cache: dict[int, list[int]] = {}
    prompts = []
    for i, _ in units:
        if i not in cache:
            cache[i] = _prompt_ids(tok, problems[i], args.use_chat_template)
        prompts.append(cache[i])
    seeds = [_sample_seed(args.seed, key, problems[i]["id"], s) for i, s in units]
    t0, tokens, done = time.perf_counter(), 0, 0
    for start, results in backend.generate(prompts, seeds):
        rows = []
        for (i, s), (text, count, finish) in zip(units[start : start + len(results)], results):
            rows.append({"id": problems[i]["id"], "sample": s, "completion": text, "num_tokens": count,
                         "finish_reason": finish})
            tokens += count
        records.append_jsonl(out_file, rows)
        done += len(rows)
        dt = time.perf_counter() - t0
        logger.info("%s: %d/%d samples, %.1f tok/s", key, done, len(units), tokens / max(dt, 1e-9))
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
    _validate(args)
    backend_name = resolve_backend(args.backend)
    out = Path(paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
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
    _check_config(out, config)

    work = {}
    for name in args.datasets:
        key = dataset_key(name)
        problems = load_problems(name, args, keep_solution=backend_name == "reference")
        key_dir = out / key
        key_dir.mkdir(exist_ok=True)
        _merge_problems(key_dir / "problems.jsonl", problems)
        work[key] = (problems, _pending(key_dir, problems, args.num_samples))
    total = sum(len(u) for _, u in work.values())
    logger.info("backend=%s, %d samples to generate (%s)", backend_name, total,
                ", ".join(f"{k}: {len(u)}" for k, (_, u) in work.items()))
    if total == 0:
        return {}
    if backend_name == "reference":
        return {k: _reference_units(out / k, p, u) for k, (p, u) in work.items()}

    gpus = _gpu_count()
    dp = args.data_parallel_size or max(1, gpus // args.tensor_parallel_size)
    if dp > 1:
        return _launch_workers(args, paths, backend_name, work, dp, gpus)
    return _generate_local(args, out, backend_name, source, work, "generations.jsonl")


def _generate_local(args, out: Path, backend_name: str, source, work, file_name: str) -> dict:
    if backend_name == "vllm":
        backend = VLLMBackend(source, args, out)
    else:
        backend = HFBackend(source, args)
    stats = {}
    for key, (problems, units) in work.items():
        if units:
            stats[key] = _run_units(backend, backend.tok, key, problems, units, out / key / file_name, args)
    return stats


def _launch_workers(args, paths, backend_name, work, dp: int, gpus: int) -> dict:
    """One process per rank on its own GPU group, each writing generations.rank<r>.jsonl; waits for all."""
    out = Path(paths.output_dir)
    if backend_name == "vllm":
        materialize_for_vllm(resolve_model(args.model), out)  # merge an adapter once, not in every worker
    procs = []
    repo_root = str(Path(__file__).resolve().parents[1])
    for rank in range(dp):
        spec = {
            "args": dataclasses.asdict(args), "output_dir": str(out), "backend": backend_name, "rank": rank,
            "work": {
                k: {"problems": [{"id": p["id"], "prompt": p["prompt"]} for p in problems],
                    "units": [list(u) for u in units[rank::dp]]}
                for k, (problems, units) in work.items()
            },
        }
        spec_path = out / f".dp_worker{rank}.json"
        records.write_json_atomic(spec_path, spec)
        env = dict(os.environ)
        if gpus:
            tp = args.tensor_parallel_size
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(rank * tp + j) for j in range(tp))
        env["PYTHONPATH"] = repo_root + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, "-m", "eval.generate", "--dp_worker", str(spec_path)]
        procs.append(subprocess.Popen(cmd, env=env, cwd=repo_root))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"data-parallel generation workers exited with codes {codes}; rerun to resume")
    stats = {}
    for rank in range(dp):
        stats_file = out / f".dp_worker{rank}.stats.json"
        part = json.loads(stats_file.read_text())
        stats_file.unlink()
        (out / f".dp_worker{rank}.json").unlink()
        for key, s in part.items():
            agg = stats.setdefault(key, {"samples": 0, "tokens": 0, "seconds": 0.0})
            agg["samples"] += s["samples"]
            agg["tokens"] += s["tokens"]
            agg["seconds"] = max(agg["seconds"], s["seconds"])  # ranks run concurrently
    return stats


def _dp_worker(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    args = GenerateArgs(**spec["args"])
    out = Path(spec["output_dir"])
    source = resolve_model(args.model)
    work = {k: (v["problems"], [tuple(u) for u in v["units"]]) for k, v in spec["work"].items()}
    stats = _generate_local(args, out, spec["backend"], source, work, f"generations.rank{spec['rank']}.jsonl")
    records.write_json_atomic(out / f".dp_worker{spec['rank']}.stats.json", stats)


def main(argv: list[str] | None = None) -> dict:
    from trl import TrlParser

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--dp_worker"]:
        _dp_worker(argv[1])
        return {}
    gen_args, paths = TrlParser((GenerateArgs, PathArgs)).parse_args_and_config(argv)
    stats = generate(gen_args, paths)
    print(json.dumps(stats, indent=2))
    return stats


if __name__ == "__main__":
    main()
