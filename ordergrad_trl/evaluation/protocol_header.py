"""A run's whole evaluation protocol, as every report states it, and the fields on which `compare` refuses two runs.

Every report.json / report.md / compare.json carries the header; `ordergrad-eval compare` refuses to set two runs
side by side when one of the fields differs.

The header is read from the run's `provenance.json` (checked against its own checksum), never from flags: the
prompt (system prompt, user template, chat template on or off and its hash), the sampling settings, n per dataset,
the seeds of the commands that generated into the run, the named protocol (`--protocol`) and which of its values
were overridden, the pass@k estimator, and the grader with its version (recorded by the score stage). A value an
older run did not record is None and shown as "not recorded", never guessed.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping
from types import MappingProxyType

__all__ = ["GRADER", "MISMATCH_FIELDS", "PASS_AT_K_ESTIMATOR", "STOP_RULE", "grader_entry", "protocol_header",
           "protocol_lines"]

GRADER = "math-verify"  # the package `tasks.rewards.score_completions` grades with
PASS_AT_K_ESTIMATOR = "unbiased, 1 - C(n-c,k)/C(n,k) per problem (Chen et al. 2021), averaged over problems"
# Every backend stops at the same ids (`tokens.stop_token_ids`) and at no string: the one stop rule of every run and
# preset (evaluation/protocols.py says why no preset needs a stop string)
STOP_RULE = ("the model's end-of-sequence ids (tokenizer and generation config) and its chat template's "
             "end-of-turn token; no stop strings")


def grader_entry(old: dict | None, reward_timeout_s: float) -> dict:
    """The provenance's `grader` after a score stage: the installed grader version and time-out added to those
    that scored the run before (a run rescored under another version holds scores of both)."""
    try:
        version = importlib.metadata.version(GRADER)
    except importlib.metadata.PackageNotFoundError:  # scoring would have failed first; recorded as unknown
        version = None
    old = old if isinstance(old, dict) else {}
    versions = [v for v in old.get("versions", []) if v != version] + [version]
    timeouts = [t for t in old.get("reward_timeout_s", []) if t != reward_timeout_s] + [reward_timeout_s]
    return {"name": GRADER, "versions": versions, "reward_timeout_s": timeouts}


def protocol_header(provenance: dict | None) -> dict:
    """The protocol of a run from its provenance (None: a run written before provenance, nothing recorded)."""
    provenance = provenance or {}
    prompt, sampling = provenance.get("prompt") or {}, provenance.get("sampling") or {}
    draws, grader = provenance.get("draws") or {}, provenance.get("grader") or {}
    datasets = provenance.get("datasets") or {}
    return {
        "protocol": draws.get("protocol"),
        "overrides": draws.get("overrides") or {},
        "template": {k: prompt.get(k) for k in ("system_prompt", "user_template", "use_chat_template",
                                                "chat_template_sha256")},
        **{k: sampling.get(k) for k in ("temperature", "top_p", "top_k", "max_new_tokens")},
        "n": {name: entry.get("num_samples") for name, entry in datasets.items() if isinstance(entry, dict)},
        "seeds": draws.get("seeds"),
        "stop": STOP_RULE,
        "pass@k_estimator": PASS_AT_K_ESTIMATOR,
        "grader": grader.get("name"),
        "grader_versions": grader.get("versions"),
        "reward_timeout_s": grader.get("reward_timeout_s"),
    }


def _shown(value) -> str:
    return "not recorded" if value is None else str(value)


def protocol_lines(header: dict | None) -> list[str]:
    """report.md's protocol paragraph (empty for a run without a header)."""
    if not header:
        return []
    t = header["template"]
    name = f"`{header['protocol']}`" if header["protocol"] else "none (flags)"
    changed = "; ".join(f"{k} {v[0]!r} -> {v[1]!r}" for k, v in header["overrides"].items())
    user = "the dataset's default" if t["user_template"] is None else f"`{t['user_template']!r}`"
    chat = {True: "on", False: "off", None: "not recorded"}[t["use_chat_template"]]
    grader = (f"{header['grader']} {', '.join(map(str, header['grader_versions'] or []))}" if header["grader"]
              else "not recorded (scored before the version was recorded)")
    seeds = ", ".join(map(str, header["seeds"])) if header["seeds"] else "not recorded"
    n = ", ".join(f"{v} ({k})" for k, v in header["n"].items()) or "not recorded"
    return [f"Protocol: {name}" + (f" (overridden: {changed})" if changed else "")
            + f". Template: chat template {chat}, system prompt "
            + (f"`{t['system_prompt']!r}`" if t["system_prompt"] else "none") + f", user template {user}. "
            f"temperature {_shown(header['temperature'])}, top_p {_shown(header['top_p'])}, top_k "
            f"{_shown(header['top_k'])}, max_new_tokens {_shown(header['max_new_tokens'])}; n = {n}; seed {seeds}. "
            + (f"Stops at {header['stop']}. " if header.get("stop") else "")
            + f"pass@k estimator: {header['pass@k_estimator']}. Grader: {grader}.", ""]


def _problems(run: Mapping, dataset: str):
    entry = (run["provenance"].get("datasets") or {}).get(dataset) or {}
    return entry.get("problems_sha256")


def _template(run: Mapping, dataset: str):
    t = run["header"]["template"]
    return {k: t[k] for k in ("system_prompt", "user_template", "use_chat_template")}


# What `compare` checks, {field: (what it is, its value for (run, dataset))}: the --allow_mismatch names
MISMATCH_FIELDS: Mapping[str, tuple[str, Callable]] = MappingProxyType({
    "problems": ("the problem set (ids, questions, golds)", _problems),
    "n": ("samples per problem", lambda run, ds: run["n"][ds]),
    "temperature": ("sampling temperature", lambda run, ds: run["header"]["temperature"]),
    "top_p": ("nucleus threshold", lambda run, ds: run["header"]["top_p"]),
    "top_k": ("top-k", lambda run, ds: run["header"]["top_k"]),
    "max_new_tokens": ("completion length limit", lambda run, ds: run["header"]["max_new_tokens"]),
    "template": ("system prompt, user template, chat template on/off", _template),
    "chat_template": ("the tokenizer's chat template (hash)",
                      lambda run, ds: run["header"]["template"]["chat_template_sha256"]),
    "grader": ("grader and version", lambda run, ds: [run["header"]["grader"], run["header"]["grader_versions"]]),
    "reward": ("reward settings (grader time-out)", lambda run, ds: run["header"]["reward_timeout_s"]),
})
