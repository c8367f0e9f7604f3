"""Provenance of a run directory: what defines its numbers, recorded before the first sample and checked on resume.

`<output_dir>/provenance.json` holds the model (what was asked for, base and adapter, and a fingerprint of each
local directory), the prompt (system prompt, user template, chat template on or off and a hash of the template
text), the sampling settings (temperature, top_p, top_k, max_new_tokens) and, per dataset, its source, split,
limit and a hash of its problems (ids, question texts and golds). A rerun with any of these changed is refused
with one line naming the change, because its samples would be mixed with (or scored against) the old ones; a
dataset's problems already in the run must be in the new data unchanged. `--overwrite` instead moves the old run
aside, to `<output_dir>.replaced-<UTC time>` beside it, and starts afresh. What does not change the numbers may
change: more samples (`--num_samples`), a larger `--limit`, more datasets, the seed, the backend, batch sizes.

The file carries its own check (`check`: a SHA-256 of everything else in it, `write_provenance`): a hand edit of
any key (the model's name in the report header, a dataset's `num_samples` or hash) is refused by every stage that
reads it, and no key in it switches another check off.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

from . import layout, records
from .errors import UsageError
from .layout import PROVENANCE

logger = logging.getLogger(__name__)

__all__ = ["PROVENANCE", "check_or_replace", "dataset_entry", "provenance_check", "read_provenance", "run_entry",
           "write_provenance"]

SAMPLING = ("temperature", "top_p", "top_k", "max_new_tokens")
PROMPT = ("system_prompt", "user_template", "use_chat_template")


def run_entry(args, source, fp: dict | None, tok) -> dict:
    """The run-level part of the provenance (the model is 'reference' for the reference backend)."""
    if source is None:
        model = {"model": "reference", "base": None, "adapter": None, "fingerprint": None}
    else:
        model = {**source.describe(), "fingerprint": fp}
    template = getattr(tok, "chat_template", None) if tok is not None else None
    if isinstance(template, dict):  # several named templates
        template = json.dumps(template, sort_keys=True)
    prompt = {k: getattr(args, k) for k in PROMPT}
    prompt["chat_template_sha256"] = hashlib.sha256(template.encode()).hexdigest() if template else None
    sampling = {k: getattr(args, k) for k in SAMPLING}
    return {"schema": 1, "model": model, "prompt": prompt, "sampling": sampling, "datasets": {},
            "draws": _draws(args, {**prompt, **sampling})}


def _draws(args, used: dict) -> dict:
    """What the report's protocol header states and no resume check compares: the named protocol, the values
    overridden from it, and the seed (a rerun may add samples under another seed: `check_or_replace` keeps all)."""
    from .protocols import overrides

    name = getattr(args, "protocol", None)
    return {"protocol": name, "overrides": overrides(name, {**used, "num_samples": args.num_samples}),
            "seeds": [args.seed]}


def dataset_entry(name: str, args, problems: list[dict]) -> dict:
    from .problems import _file_of, problems_index, problems_sha256

    path = _file_of(name)
    source = str(path.resolve()) if path is not None else name
    return {"source": source, "split": args.split, "limit": args.limit, "local_data": args.local_data,
            "num_samples": args.num_samples, "num_problems": len(problems),
            "problems_sha256": problems_sha256(problems), "problems_index": problems_index(problems)}


def provenance_check(provenance: dict) -> str:
    """SHA-256 of a provenance record's contents (all but `check`), in one canonical JSON spelling."""
    return hashlib.sha256(records.canonical({k: v for k, v in provenance.items() if k != "check"})).hexdigest()


def write_provenance(out: Path, provenance: dict) -> None:
    """Write `out/provenance.json` whole, stamped with its check."""
    records.write_json_atomic(out / PROVENANCE, dict(provenance, check=provenance_check(provenance)))


def read_provenance(out: Path) -> dict | None:
    """The run's provenance, None if it has none; a file that is not one, or whose check does not match its
    contents (it is written atomically, so edited by hand), is a UsageError, since the run's samples can no longer
    be told apart from another run's."""
    path = out / PROVENANCE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        problem = f"not valid JSON ({err})"
    else:
        parts = ("model", "prompt", "sampling", "datasets")
        if not (isinstance(data, dict) and all(isinstance(data.get(k), dict) for k in parts)):
            problem = f"not a provenance record (a JSON object with {', '.join(parts)})"
        elif "check" not in data:
            problem = "it carries no check (written by an earlier version, or the check was deleted)"
        elif data["check"] != provenance_check(data):
            problem = "its contents do not match its check (edited by hand)"
        else:
            return data
    raise UsageError(f"{path}: {problem}; restore it, or pass --overwrite to move the run aside and start afresh")


def _model_changes(old: dict, new: dict) -> list[str]:
    """A local directory is its content (a moved checkpoint is the same model, a note added to it too), a Hub id its
    name; a change names the file."""
    from .modeling import fingerprint_changes

    files = fingerprint_changes(old.get("fingerprint"), new.get("fingerprint"))
    def local(m: dict, role: str) -> bool:
        return isinstance((m.get("fingerprint") or {}).get(role), dict)

    names = [r for r in ("base", "adapter") if not (local(old, r) and local(new, r)) and old.get(r) != new.get(r)]
    if not files and not names:
        return []
    what = " (weights or config differ): " + ", ".join(files) if files else ""
    return [f"model {old.get('model')} -> {new.get('model')}{what}"]


def _run_changes(old: dict, new: dict) -> list[str]:
    changes = _model_changes(old["model"], new["model"])
    for part in ("prompt", "sampling"):
        for k in new[part]:
            if old[part].get(k) != new[part][k]:
                changes.append(f"{k} {old[part].get(k)!r} -> {new[part][k]!r}")
    return changes


def _dataset_changes(key: str, old: dict, new: dict, run_problems: list[dict], fresh: list[dict]) -> list[str]:
    if old.get("split") != new["split"]:
        return [f"{key}: split {old.get('split')!r} -> {new['split']!r}"]
    by_id = {p["id"]: p for p in fresh}
    for p in run_problems:
        q = by_id.get(p["id"])
        if q is None:
            return [f"{key}: problem {p['id']!r} is not in {new['source']} (was {old.get('source')})"]
        for fld in ("question", "answer"):
            if q.get(fld) != p.get(fld):
                what = "gold" if fld == "answer" else "question"
                return [f"{key}: the {what} of problem {p['id']!r} changed ({json.dumps(p.get(fld))[:40]} -> "
                        f"{json.dumps(q.get(fld))[:40]}, source {new['source']})"]
    return []


def _aside_name(name: str, suffix: str, limit: int = 255) -> str:
    """`name + suffix` within the file system's name limit (bytes): a long run name is cut and keeps a hash of it."""
    if len((name + suffix).encode()) <= limit:
        return name + suffix
    tag = "-" + hashlib.sha1(name.encode()).hexdigest()[:8]
    head = name.encode()[: limit - len((tag + suffix).encode())].decode(errors="ignore")
    return head + tag + suffix


def _move_aside(out: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = out.with_name(_aside_name(out.name, f".replaced-{stamp}"))
    i = 1
    while dest.exists():
        dest, i = out.with_name(_aside_name(out.name, f".replaced-{stamp}-{i}")), i + 1
    try:
        os.rename(out, dest)
    except OSError as err:
        raise UsageError(f"--overwrite: cannot move {out} aside to {dest.name} ({err.strerror or err}); move or "
                         "delete it yourself, or pick another --output_dir") from None
    return dest


def check_or_replace(out: Path, new: dict, datasets: dict, overwrite: bool, verify=None) -> dict:
    """The provenance to write for this run: the old one plus this run's new datasets, or `new` for a fresh run.

    `datasets` is {key: (entry, fresh problems of the whole set)}. A run with other provenance, or whose files
    `verify(out, old provenance)` finds a mismatch in (`verify.run_mismatch`), is refused, or with `overwrite`
    moved aside (nothing is deleted).
    """
    try:
        old, changes = (read_provenance(out) if out.is_dir() else None), []
    except UsageError as err:
        if not overwrite:
            raise
        old, changes = None, [str(err).split(";")[0]]
    earlier = out.is_dir() and ((out / layout.LEGACY_CONFIG).is_file() or bool(layout.dataset_dirs(out)))
    legacy = old is None and earlier
    if legacy and not changes:
        changes = ["it was written without provenance (by an earlier version)"]
    if old is not None:
        if old.get("schema") != 1:
            changes.append(f"provenance schema {old.get('schema')!r} is not 1")
        else:
            changes += _run_changes(old, new)
            mismatch = verify(out, old) if verify is not None else None  # its files: still what it recorded?
            if mismatch:
                changes.append(mismatch)
            for key, (entry, fresh) in datasets.items():
                if isinstance(old["datasets"].get(key), dict):  # else `verify` named it above
                    run_problems = records.read_jsonl(out / key / "problems.jsonl")
                    changes += _dataset_changes(key, old["datasets"][key], entry, run_problems, fresh)
    if changes:
        if not overwrite:
            raise UsageError(f"--output_dir {out} holds a run with other provenance: {'; '.join(changes)}; use a "
                             "new --output_dir, or pass --overwrite to move that run aside and start afresh")
        dest = _move_aside(out)
        logger.warning("--overwrite: moved the earlier run (%s) to %s", "; ".join(changes), dest)
        old = None
    merged = dict(new, datasets=dict(old["datasets"]) if old else {})
    if old and "draws" in new:  # the samples of every seed so far, scored by every grader so far (`protocol_header`)
        seeds = [s for s in ((old.get("draws") or {}).get("seeds") or []) if s not in new["draws"]["seeds"]]
        merged["draws"] = dict(new["draws"], seeds=seeds + new["draws"]["seeds"])
        if "grader" in old:
            merged["grader"] = old["grader"]
    return merged
