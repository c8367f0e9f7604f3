"""Stage 1: sample n completions per problem and append them to JSONL, resuming where an earlier run stopped.

    ordergrad-eval generate --model <hub id | checkpoint dir | adapter dir> --datasets gsm8k arithmetic \\
        --local_data --limit 32 --num_samples 8 --max_new_tokens 256 --output_dir runs/smollm2

Backends: `vllm` (when installed and a GPU is present; the default then), `hf` (batched `transformers` generate
on CPU or GPU) and `reference` (each problem's reference solution as every sample: a check that extraction and
scoring give 100%, no model needed). `--data_parallel_size D` runs D worker processes, each on its own GPU(s),
on disjoint shares of the pending samples.

Resume: samples already in `<output_dir>/<dataset>/generations*.jsonl` are not generated again; raising
`--num_samples` or `--limit`, or adding datasets, on a rerun adds only the missing samples. A run whose
provenance differs (model, data, prompt, sampling settings) is refused, or moved aside with `--overwrite`
(`provenance.py`); so is a run whose files do not match its provenance (`verify.py`). The run is locked against
other writers while this stage runs (`lock.py`). Planning is `plan.py`, sampling `sampling.py` and `parallel.py`.
"""

from __future__ import annotations

import logging

from . import layout
from .args import GenerateArgs, PathArgs, validate_generate
from .lock import writer_lock
from .modeling import materialize_merged
from .parallel import launch_workers
from .plan import plan_generation
from .sampling import generate_local, reference_units

logger = logging.getLogger(__name__)

__all__ = ["generate"]


def generate(args: GenerateArgs, paths: PathArgs) -> dict:
    """Generate every missing sample of every dataset; returns throughput stats {dataset: {...}}."""
    validate_generate(args)
    with writer_lock(layout.run_dir(paths.output_dir), "generate"):
        return _generate(args, paths)


def _generate(args: GenerateArgs, paths: PathArgs) -> dict:
    plan = plan_generation(args, paths)
    logger.info("backend=%s, %d samples to generate (%s)", plan.backend, plan.total,
                ", ".join(f"{k}: {len(w.units)}" for k, w in plan.work.items()))
    if plan.total == 0:
        return {}
    if plan.backend == "reference":
        return {k: reference_units(plan.out / k, w) for k, w in plan.work.items() if w.units}
    args, source = plan.args, plan.source
    if len(plan.groups) > 1 or plan.backend == "vllm":
        # other processes (vLLM, the workers) load a plain checkpoint: an adapter is merged once, here
        dtype = ("bfloat16" if args.dtype == "auto" else args.dtype) if plan.backend == "vllm" else "float32"
        source = materialize_merged(source, plan.out, plan.tok, dtype, plan.fingerprint)
    if len(plan.groups) > 1:
        return launch_workers(args, plan.out, plan.backend, source, plan.work, plan.groups, paths.disable_tqdm)
    return generate_local(args, plan.out, plan.backend, source, plan.tok, plan.work, "generations.jsonl",
                          disable_tqdm=paths.disable_tqdm)
