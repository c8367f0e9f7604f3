"""Planning a generation run: arguments, data, model and provenance checked, then what is still to generate.

Order matters: everything that can fail on bad input fails here, before weights load or a sample is drawn, and
in this order: flags, dataset names, GPUs, the model path, the data files and their problems, the prompts
(rendered once with the run's one tokenizer), the provenance of an existing run. Only then is anything written:
`provenance.json` first, then each dataset's `problems.jsonl` (earlier problems kept, new ones appended).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from . import layout, records
from .args import GenerateArgs, PathArgs, validate_generate
from .devices import resolve_backend, visible_devices, worker_devices
from .errors import UsageError
from .lock import acquire
from .modeling import ModelSource, fingerprint, load_tokenizer, resolve_model
from .problems import check_keys, load_problems, problems_index, problems_sha256
from .progress import quiet_datasets
from .provenance import check_or_replace, dataset_entry, read_provenance, run_entry, write_provenance
from .sampling import Work
from .tokens import prompt_ids
from .verify import generation_tag, run_mismatch

logger = logging.getLogger(__name__)

__all__ = ["Plan", "plan_generation"]


@dataclass
class Plan:
    args: GenerateArgs  # `model` resolved (workers must not resolve the default again)
    out: Path
    backend: str
    groups: list[str | None]  # CUDA_VISIBLE_DEVICES per data-parallel rank
    source: ModelSource | None  # None: the reference backend
    tok: object
    fingerprint: dict | None
    work: dict[str, Work]

    @property
    def total(self) -> int:
        return sum(len(w.units) for w in self.work.values())


def _earlier_fingerprint(out: Path, source: ModelSource) -> dict | None:
    """The run's recorded fingerprint of the same model directories, whose unchanged files need no rehash."""
    try:
        old = read_provenance(out) if out.is_dir() else None
    except UsageError:  # refused (or moved aside) by the provenance check that follows
        old = None
    model = (old or {}).get("model") or {}
    same = (model.get("base"), model.get("adapter")) == (source.base, source.adapter)
    return model.get("fingerprint") if same else None


def _merged_problems(path: Path, rows: list[dict]) -> tuple[list[dict], bool]:
    """problems.jsonl's new content, earlier problems (kept, so a smaller --limit never orphans samples) + new
    ones, and whether it differs from the file."""
    old = records.read_jsonl(path)
    seen = {r["id"] for r in old}
    fresh = [{k: v for k, v in r.items() if k != "solution"} for r in rows if r["id"] not in seen]
    return old + fresh, bool(fresh) or not path.is_file()


def _pending(key_dir: Path, problems: list[dict], n: int) -> list[tuple[int, int]]:
    for file in layout.generation_files(key_dir):  # a cut last line is repaired before anything is counted
        records.repair_tail(file)
    done = records.read_samples(key_dir)
    return [(i, s) for i, p in enumerate(problems) for s in range(n) if (p["id"], s) not in done]


def _recorded_seeds(out: Path) -> list | None:
    """The seeds the run's samples were drawn with (provenance `draws.seeds`), None for a new run or one that did
    not record them."""
    try:
        old = read_provenance(out) if out.is_dir() else None
    except UsageError:  # refused (or moved aside) by the provenance check that follows
        return None
    seeds = ((old or {}).get("draws") or {}).get("seeds")
    return seeds if isinstance(seeds, list) else None


def _drop_unused_seed(seed: int, out: Path, provenance: dict, before: list, pending: dict) -> None:
    """`--seed` on a rerun that draws no sample: a warning naming it, and it is not recorded (the protocol header
    lists the seeds the run's samples were drawn with). A rerun that draws samples records its seed beside the old."""
    if seed in before or any(pending.values()):
        return
    logger.warning("--seed %d is unused: every sample this command asks for is already in %s, drawn with seed(s) %s; "
                   "raise --num_samples or --limit to draw more with it, or use a new --output_dir", seed, out,
                   ", ".join(map(str, before)))
    provenance["draws"] = dict(provenance.get("draws") or {}, seeds=list(before))


def _limit(old: int | None, new: int | None) -> int | None:
    return None if old is None or new is None else max(old, new)


def _check_rerun(out: Path, key: str, entry: dict, old) -> None:
    """UsageError when this command asks for fewer samples, or fewer problems, than the run already holds of `key`:
    the report covers everything the run holds, so the smaller request would be silently ignored."""
    if not isinstance(old, dict):
        return
    held_n, held_problems = old.get("num_samples"), old.get("num_problems")
    fix = ("the report covers everything the run holds: pass the run's own value (or more, to add), --overwrite to "
           "move the run aside and start again, or another --output_dir")
    if isinstance(held_n, int) and entry["num_samples"] < held_n:
        raise UsageError(f"--num_samples {entry['num_samples']}: {out} already holds {held_n} samples per problem of "
                         f"{key} (provenance.json); {fix}")
    if isinstance(held_problems, int) and entry["num_problems"] < held_problems:
        raise UsageError(f"--limit {entry['limit']}: {out} already holds {held_problems} problems of {key} "
                         f"(provenance.json), this command asks for {entry['num_problems']}; {fix}")


def plan_generation(args: GenerateArgs, paths: PathArgs) -> Plan:
    # 1. everything that can be checked without data or weights
    validate_generate(args)
    backend = resolve_backend(args.backend)
    keys = check_keys(args.datasets)
    groups: list[str | None] = [None]
    if backend != "reference":
        devices = visible_devices()
        dp = args.data_parallel_size or max(1, len(devices) // args.tensor_parallel_size)
        groups = worker_devices(dp, args.tensor_parallel_size, devices)
    out = layout.run_dir(paths.output_dir)
    source = resolve_model(args.model) if backend != "reference" else None
    if source is not None:
        args = dataclasses.replace(args, model=source.model)
    if args.temperature == 0 and args.num_samples > 1:
        logger.warning("temperature=0 (greedy) with num_samples=%d: all samples of a problem will be equal",
                       args.num_samples)
    # 2. problems, and the prompts rendered with the run's tokenizer: template errors before any weights load
    with quiet_datasets(paths.disable_tqdm):
        loaded = {key: load_problems(name, args, keep_solution=backend == "reference") for key, name in keys.items()}
    tok = load_tokenizer(source) if source is not None else None
    prompts = {key: [prompt_ids(tok, p, args.use_chat_template) for p in subset] if tok is not None else None
               for key, (subset, _) in loaded.items()}
    # 3. provenance: a run with other model, prompt, sampling or data is refused (or, --overwrite, moved aside)
    fp = fingerprint(source, _earlier_fingerprint(out, source)) if source is not None else None
    entries = {key: (dataset_entry(keys[key], args, subset), full) for key, (subset, full) in loaded.items()}
    acquire(out)  # one writer: a second one, or --overwrite while one writes, stops here
    before = _recorded_seeds(out)
    provenance = check_or_replace(out, run_entry(args, source, fp, tok), entries, args.overwrite, run_mismatch)
    for key, (entry, _) in entries.items():  # a rerun that asks for less than the run holds would report more
        _check_rerun(out, key, entry, provenance["datasets"].get(key))
    if out.is_dir() and before is not None:  # not moved aside by --overwrite: the run's own samples are there
        pending = {key: _pending(out / key, subset, args.num_samples) for key, (subset, _) in loaded.items()}
        _drop_unused_seed(args.seed, out, provenance, before, pending)
    # 4. write: provenance first (a kill from here on leaves a run that knows what it is), then the problems
    merged = {key: _merged_problems(out / key / "problems.jsonl", subset) for key, (subset, _) in loaded.items()}
    for key, (rows, _) in merged.items():
        entry, old = entries[key][0], provenance["datasets"].get(key)
        provenance["datasets"][key] = dict(
            entry, limit=_limit(old.get("limit"), entry["limit"]) if old else entry["limit"],
            num_samples=max(entry["num_samples"], (old or {}).get("num_samples") or 0),  # sample indices < this
            num_problems=len(rows), problems_sha256=problems_sha256(rows), problems_index=problems_index(rows))
    out.mkdir(parents=True, exist_ok=True)
    acquire(out)  # the directory now at `out` (a new one after --overwrite's move) is locked too
    write_provenance(out, provenance)
    for key, (rows, changed) in merged.items():
        (out / key).mkdir(exist_ok=True)
        if changed:
            records.write_jsonl_atomic(out / key / "problems.jsonl", rows)
    # 5. what is still to generate (of this command's problems)
    work = {}
    for key, (subset, _) in loaded.items():
        tags = [generation_tag(provenance, p) for p in subset]
        work[key] = Work(ids=[p["id"] for p in subset], prompts=prompts[key] or [None] * len(subset), tags=tags,
                         units=_pending(out / key, subset, args.num_samples),
                         solutions=[p.get("solution") for p in subset] if backend == "reference" else None)
    return Plan(args, out, backend, groups, source, tok, fp, work)
