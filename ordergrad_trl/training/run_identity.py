"""A checkpoint knows its run: a resume continues its own run only, and a new run never lands on another's files.

Every run of the recipe writes its resolved settings (`resolved_config.RESOLVED_CONFIG`) into `output_dir` and into
each `checkpoint-<step>/`. Before anything loads:

- `resolve_checkpoint` reads `--resume_from_checkpoint`: `true` / `last` (any case) is the newest
  `checkpoint-<step>` of `output_dir`, `false` / `none` / empty is a fresh run, anything else a checkpoint folder,
  which must hold a readable `trainer_state.json` (a corrupt one is named here, not in a traceback mid-start-up).
- `check_resume` compares that checkpoint's record with the new settings and refuses, naming every field that
  differs, unless the field is one a resume may change (`RESUMABLE`: the run's length, where and how often it
  logs, saves and evaluates, where it reports). Everything else is compared generically, field by field over every
  group of the record (every `ordergrad_*` field, the plan, the model, `num_generations`, the data, the seed, the
  optimizer...), so a field added later is covered without a list. A field the checkpoint's record lacks (added
  since) counts as differing unless its new value is its default (for the plan, None: a stage unused, such as
  the prompt weight of a checkpoint saved before there were any).
- `check_new_run` refuses a fresh run into an `output_dir` that holds another run's record (settings that differ
  outside `RESUMABLE`), its checkpoints, or a model's weights without a record, by name, unless `overwrite` is
  asked for: the old run is then moved aside whole to `<output_dir>.replaced-<UTC time>` (as
  `ordergrad-eval --overwrite` does; nothing is deleted).

The record's `data` group (`data_hashes`) holds a hash of the data's rows, so the data set's content, not only its
path, is part of the identity. Each refusal is a `RunIdentityError` (a ValueError): the recipe prints it as one
line and exits 2.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from .resolved_config import RESOLVED_CONFIG

__all__ = ["DATA_GROUP", "RESUMABLE", "RunIdentityError", "check_new_run", "check_resume", "check_run", "data_hashes",
           "differences", "field_defaults", "resolve_checkpoint"]

TRAINER_STATE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# the files a saved model's weights are in: their presence means a model is there (sharded ones have an index)
_WEIGHTS = frozenset({"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                      "pytorch_model.bin.index.json", "adapter_model.safetensors", "adapter_model.bin"})
_TRUE = {"true", "yes", "1", "last", "latest"}
_FALSE = {"", "false", "no", "0", "none", "null"}

# Fields a resume may change: the run's length; where, how often and what it logs, saves, evaluates and pushes; the
# process's own plumbing. Every other field of the record must match the checkpoint's.
RESUMABLE: frozenset[str] = frozenset({
    # length
    "max_steps", "num_train_epochs",
    # output and reporting
    "output_dir", "resume_from_checkpoint", "overwrite_output_dir", "run_name", "project", "report_to",
    "push_to_hub", "disable_tqdm",
    # logging cadence and content
    "logging_steps", "logging_strategy", "logging_first_step", "logging_nan_inf_filter", "log_level",
    "log_level_replica", "log_on_each_node", "log_completions", "log_completions_hub_repo", "log_unique_prompts",
    "log_multimodal", "num_completions_to_print", "skip_memory_metrics", "include_num_input_tokens_seen",
    "ordergrad_log_ks",
    # saving cadence
    "save_steps", "save_strategy", "save_total_limit", "save_only_model", "save_on_each_node",
    "enable_jit_checkpoint",
    # evaluation cadence and set
    "eval_steps", "eval_strategy", "eval_delay", "eval_on_start", "eval_accumulation_steps",
    "eval_do_concat_batches", "eval_use_gather_object", "per_device_eval_batch_size", "num_generations_eval",
    "batch_eval_metrics", "prediction_loss_only", "do_eval", "do_predict", "do_train", "load_best_model_at_end",
    "metric_for_best_model", "greater_is_better", "include_for_metrics", "eval_dataset_name", "max_eval_samples",
    "dataset_test_split", "eval_before_training",
    # process plumbing
    "local_rank", "ddp_timeout", "dataloader_num_workers", "dataloader_pin_memory",
    "dataloader_persistent_workers", "dataloader_prefetch_factor", "dataloader_multiprocessing_context",
    "torch_empty_cache_steps",
})
_RESUMABLE_PREFIXES = ("hub_", "trackio_")


DATA_GROUP = "data"  # the record's group of content hashes (`data_hashes`): the data, not only its path


def data_hashes(**datasets) -> dict[str, str | None]:
    """`{"<name>_sha256": hex}` of each dataset's rows (every column, in order; None for a dataset that is None):
    what a run trained on, so that a resume or rerun after the file at the same path changed is refused."""
    import hashlib

    out = {}
    for name, dataset in datasets.items():
        if dataset is None:
            out[f"{name}_sha256"] = None
            continue
        digest = hashlib.sha256()
        for row in dataset:
            digest.update(json.dumps(row, sort_keys=True, default=str).encode() + b"\n")
        out[f"{name}_sha256"] = digest.hexdigest()
    return out


class RunIdentityError(ValueError):
    """A resume of another run, or a new run onto another run's files: one line naming the fields or files."""


def resumable(name: str) -> bool:
    return name in RESUMABLE or name.startswith(_RESUMABLE_PREFIXES)


def _flat(record: dict) -> dict[str, Any]:
    """`{"training.learning_rate": 1e-6, ..., "ordergrad_plan.stages": [...]}`: one entry per field of each group."""
    out = {}
    for group, fields in record.items():
        if isinstance(fields, dict):
            for name, value in fields.items():
                out[f"{group}.{name}"] = value
        else:
            out[group] = fields
    return out


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return a == b  # 1 and 1.0 from YAML vs the CLI
    return a == b


def differences(old: dict, new: dict, defaults: dict[str, Any] | None = None) -> list[str]:
    """`group.field: old -> new` for every field of `new` that differs from `old` and is not `resumable`; a field
    `old` lacks counts unless its new value equals `defaults[field]`."""
    new = json.loads(json.dumps(new, default=str))  # compared as both are stored
    before, after = _flat(old), _flat(new)
    defaults = defaults or {}
    out = []
    for key, value in after.items():
        name = key.rsplit(".", 1)[-1]
        if resumable(name):
            continue
        if key not in before:
            if key.startswith(f"{DATA_GROUP}."):  # a record from before the data's hash was kept: the path decides
                continue
            if name in defaults and _same(json.loads(json.dumps(defaults[name], default=str)), value):
                continue
            if key.startswith("ordergrad_plan.") and value is None:  # a stage of the plan added since, unused now
                continue
            out.append(f"{key}: (not in the checkpoint's record) -> {_short(value)}")
        elif not _same(before[key], value):
            out.append(f"{key}: {_short(before[key])} -> {_short(value)}")
    return out


def _short(value) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _checkpoints(output_dir: Path) -> list[Path]:
    if not output_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in output_dir.iterdir() if (m := _CHECKPOINT.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise RunIdentityError(f"{what}: {path} is missing") from None
    except (OSError, ValueError) as err:  # ValueError: not JSON, not UTF-8
        raise RunIdentityError(f"{what}: {path} cannot be read ({type(err).__name__}: "
                               f"{' '.join(str(err).split())[:120]}); the file is corrupt") from None
    if not isinstance(data, dict):
        raise RunIdentityError(f"{what}: {path} holds a {type(data).__name__}, not a JSON object; the file is "
                               "corrupt")
    return data


def resolve_checkpoint(value, output_dir: str | os.PathLike) -> Path | None:
    """The checkpoint folder `--resume_from_checkpoint value` names (None: a fresh run); RunIdentityError naming
    the flag when it names none, or when its `trainer_state.json` is missing or corrupt."""
    out = Path(output_dir).expanduser()
    if value is None or value is False:
        return None
    text = "true" if value is True else str(value).strip()
    if text.lower() in _FALSE:
        return None
    if text.lower() in _TRUE:
        found = _checkpoints(out)
        if not found:
            raise RunIdentityError(f"resume_from_checkpoint {text}: output_dir {out} holds no checkpoint-<step> "
                                   "folder to resume from; give a checkpoint folder, or leave it unset for a new run")
        path = found[-1]
    else:
        path = Path(text).expanduser()
        if not path.is_dir():
            raise RunIdentityError(f"resume_from_checkpoint {text}: no such checkpoint folder (relative to "
                                   f"{Path.cwd()}); give a checkpoint-<step> folder, or true for the newest one in "
                                   "output_dir")
    state = _read_json(path / TRAINER_STATE, f"resume_from_checkpoint {text}")
    step = state.get("global_step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise RunIdentityError(f"resume_from_checkpoint {text}: {path / TRAINER_STATE} has no valid global_step "
                               f"(got {_short(step)}); the file is corrupt")
    return path


def check_resume(checkpoint: Path, new: dict, defaults: dict[str, Any] | None = None) -> None:
    """RunIdentityError naming every field in which `new` (a resolved config) differs from the checkpoint's record,
    outside `RESUMABLE`."""
    old = _read_json(checkpoint / RESOLVED_CONFIG, f"resume_from_checkpoint {checkpoint}")
    changed = differences(old, new, defaults)
    if changed:
        raise RunIdentityError(
            f"resume_from_checkpoint {checkpoint}: the checkpoint was trained with other settings, and resuming "
            f"would continue that run under these while its record claimed them from step 0: {'; '.join(changed)}. "
            "Resume with the checkpoint's settings (see its " + RESOLVED_CONFIG + "), or start a new run in another "
            "output_dir (a resume may change only: max_steps, num_train_epochs, output, logging, saving, evaluation "
            "and reporting settings)")


def _move_aside(out: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest, i = out.with_name(f"{out.name}.replaced-{stamp}"), 1
    while dest.exists() or dest.is_symlink():
        dest, i = out.with_name(f"{out.name}.replaced-{stamp}-{i}"), i + 1
    try:
        os.rename(out, dest)
    except OSError as err:
        raise RunIdentityError(f"overwrite_output_dir: cannot move {out} aside to {dest.name} "
                               f"({err.strerror or err}); move or delete it yourself, or pick another output_dir") \
            from None
    return dest


def check_new_run(output_dir: str | os.PathLike, new: dict, overwrite: bool, main_process: bool = True,
                  defaults: dict[str, Any] | None = None) -> Path | None:
    """Refuse a fresh run into an `output_dir` that holds another run (a record that differs outside `RESUMABLE`,
    or checkpoints), unless `overwrite`: then the old run is moved aside (main process only); its new place is
    returned. The same settings again, without checkpoints, are the same run: nothing to refuse."""
    out = Path(output_dir).expanduser()
    if not out.is_dir():
        return None
    record, checkpoints = out / RESOLVED_CONFIG, _checkpoints(out)
    changed: list[str] = []
    unrecorded: list[str] = []
    if record.exists() or record.is_symlink():
        try:
            changed = differences(_read_json(record, f"output_dir {out}"), new, defaults)
        except RunIdentityError as err:
            changed = [str(err)]
    else:  # a model whose run kept no record (another tool's, or ours before it kept one): not ours to replace
        unrecorded = sorted(p.name for p in out.iterdir() if p.name in _WEIGHTS)
    if not changed and not checkpoints and not unrecorded:
        return None
    if overwrite:
        return _move_aside(out) if main_process else None
    held = []
    if changed:
        held.append(f"the record of a run with other settings ({'; '.join(changed[:8])}"
                    f"{f'; and {len(changed) - 8} more' if len(changed) > 8 else ''})")
    if unrecorded:
        held.append(f"a saved model ({', '.join(unrecorded)}) without the record ({RESOLVED_CONFIG}) that would "
                    "say which settings trained it")
    if checkpoints:
        held.append(f"{len(checkpoints)} checkpoint(s) ({', '.join(p.name for p in checkpoints[-3:])})")
    raise RunIdentityError(
        f"output_dir {out} holds another run: {' and '.join(held)}; a new run there would replace its model and "
        "leave its checkpoints beside yours. Resume it (--resume_from_checkpoint true, with its settings), pick "
        "another output_dir, or pass --overwrite_output_dir true to move the old run aside")


def field_defaults(*groups) -> dict[str, Any]:
    """{field: default} of the argument dataclasses `groups` (fields with a plain or factory default)."""
    import dataclasses

    out = {}
    for group in groups:
        for f in dataclasses.fields(group):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                try:
                    out[f.name] = f.default_factory()  # type: ignore[misc]
                except Exception:
                    continue
    return out


def check_run(record: dict, output_dir: str | os.PathLike, resume, overwrite: bool, main_process: bool = True,
              defaults: dict[str, Any] | None = None) -> str | None:
    """The one hook for a training entry point, before the model loads: the checkpoint to resume from (its folder
    as a string, or None for a fresh run), once `check_resume` or `check_new_run` has passed for `record` (the new
    run's resolved config). RunIdentityError otherwise."""
    from .output_dir import OutputDirError, refuse_links

    try:
        refuse_links(output_dir)  # before anything loads: a save would write through it
    except OutputDirError as err:
        raise RunIdentityError(str(err)) from None
    checkpoint = resolve_checkpoint(resume, output_dir)
    if checkpoint is not None:
        check_resume(checkpoint, record, defaults)
        return str(checkpoint)
    if main_process:
        check_new_run(output_dir, record, overwrite, main_process, defaults)
    return None
