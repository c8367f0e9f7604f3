"""Input checks of recipes/math_cvar.py: every user error as one line naming the field or path, before any model loads.

The argument classes check each setting alone; what needs several of them (a `reward_weights` count against
`reward_funcs`) or the filesystem (a data file and its lines, a model folder, a writable `output_dir`) is checked
here, right after parsing. A local data file is read by eval's own checker (`check_data_file`), so both entry points
name a broken line the same way.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

__all__ = ["InputError", "check_chat_template", "check_inputs", "held_warnings", "quiet_progress"]


class InputError(ValueError):
    """Bad input found after parsing (a data file, a model path): one line, exit status 2, like a bad flag."""


def _check_data(name: str, field_name: str) -> None:
    """A local data file (a path that exists, or one named like a data file) is read and checked row by row here,
    by eval's checker, so a broken line is named by file and line before any model loads."""
    from ordergrad_trl.evaluation.errors import UsageError
    from ordergrad_trl.evaluation.problems import DATA_SUFFIXES, check_data_file

    if not name.strip():
        raise InputError(f"{field_name} is empty: give a registered set, a Hub id or a .jsonl/.json/.parquet file")
    path = Path(name).expanduser()
    if not (path.exists() or path.suffix.lower() in DATA_SUFFIXES or name.startswith((".", "/", "~"))):
        if "/" not in name:  # a registered set (a Hub id, org/name, is only known once loaded)
            from ordergrad_trl.tasks.data import get_math_set

            try:
                get_math_set(name)
            except ValueError as err:
                raise InputError(f"{field_name} {name}: {err}") from None
        return
    if path.is_dir():
        raise InputError(f"{field_name} {name}: is a directory; give a .jsonl, .json or .parquet file")
    if not path.is_file():
        raise InputError(f"{field_name} {name}: no such file (relative to {Path.cwd()})")
    if path.suffix.lower() not in DATA_SUFFIXES:
        raise InputError(f"{field_name} {name}: not a data file; give a .jsonl, .json or .parquet file")
    try:
        check_data_file(name, path)
    except UsageError as err:  # it names eval's flag: name ours
        raise InputError(str(err).replace(f"--datasets {name}", f"{field_name} {name}", 1)) from None
    except OSError as err:
        raise InputError(f"{field_name} {name}: cannot read it ({err.strerror or err})") from None


def _check_output_dir(output_dir: str) -> None:
    """Write a probe where `output_dir` is (or will be created): a typo'd or read-only path fails now, not after
    training. Leaves nothing behind (the folder itself is created by the trainer)."""
    path = Path(output_dir).expanduser()
    existing = next(p for p in (path, *path.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        raise InputError(f"output_dir {output_dir}: {existing} is a file, not a folder")
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".write-test-").cleanup()
    except OSError as err:
        raise InputError(f"output_dir {output_dir}: cannot write in {existing} ({err.strerror or err})") from None


def check_inputs(script_args, training_args, model_args) -> None:
    """The cross-field and filesystem checks no single argument class can make; InputError names the field."""
    from ordergrad_trl.training import trl_private
    from ordergrad_trl.training.numeric_fields import check_numeric_fields

    for group in (script_args, model_args):  # OrderGradConfig checks its own numeric fields when it is built
        check_numeric_fields(group)
    if training_args.use_vllm and trl_private.installed_vllm() is None:  # TRL fails later, with a traceback
        raise InputError(f"use_vllm=True but vLLM is not installed: pip install \"ordergrad-trl[vllm]\" (vllm"
                         f"{trl_private.trl_vllm_range()}), or set use_vllm false")
    funcs, weights = script_args.reward_funcs, training_args.reward_weights
    if weights is not None and len(weights) != len(funcs):
        raise InputError(f"reward_weights {list(weights)} has {len(weights)} entries but reward_funcs {funcs} has "
                         f"{len(funcs)}: give one weight per reward function, in the same order")
    from ordergrad_trl.tasks.rewards import get_reward_funcs
    from ordergrad_trl.training.reward_checks import RewardRangeError, check_prompt_weight_range

    try:  # a reward range a prompt weight cannot take: now, not at step 1 once the model has loaded
        check_prompt_weight_range(training_args, get_reward_funcs(funcs, training_args), list(funcs))
    except RewardRangeError as err:
        raise InputError(str(err)) from None
    objectives = training_args.ordergrad_reward_objectives
    if objectives is not None and len(objectives) != len(funcs):
        raise InputError(f"ordergrad_reward_objectives {list(objectives)} has {len(objectives)} entries but "
                         f"reward_funcs {funcs} has {len(funcs)}: give one objective per reward function, in order")
    model = model_args.model_name_or_path
    if model is not None and not model.strip():
        raise InputError("model_name_or_path is empty: give a model folder or a Hub id, or leave it unset (null) for "
                         "the default model")
    if model is not None:
        path = Path(model).expanduser()
        if path.is_file():
            raise InputError(f"model_name_or_path {model}: is a file; give a model folder (with config.json) or a "
                             "Hub id")
        if path.is_dir() and not (path / "config.json").is_file():
            raise InputError(f"model_name_or_path {model}: the folder has no config.json (not a saved model)")
        if path.is_dir():
            from ordergrad_trl.evaluation.modeling import weights_problem

            problem = weights_problem(path)
            if problem:
                raise InputError(f"model_name_or_path {model}: {problem}")
        if not path.exists() and (model.startswith((".", "/", "~")) or model.count("/") > 1 or "\\" in model):
            raise InputError(f"model_name_or_path {model}: no such folder (relative to {Path.cwd()}), and not a "
                             "Hub id (org/name)")
    _check_data(script_args.dataset_name or "", "dataset_name")
    if script_args.max_eval_samples != 0 and script_args.eval_dataset_name:  # unset or "": the training set's
        _check_data(script_args.eval_dataset_name, "eval_dataset_name")
    _check_output_dir(training_args.output_dir)


def check_chat_template(processing_class, model: str | None) -> None:
    """InputError unless the tokenizer (or the processor's tokenizer) has a chat template: the recipe's prompts are
    chat messages, and TRL would fail at the first step with a traceback."""
    tokenizer = getattr(processing_class, "tokenizer", None)
    if not getattr(processing_class, "chat_template", None) and not getattr(tokenizer, "chat_template", None):
        raise InputError(f"model_name_or_path {model}: its tokenizer has no chat template, and the recipe's prompts "
                         "are chat messages; use an instruct/chat model, or add a chat_template to its "
                         "tokenizer_config.json")


@contextmanager
def held_warnings(loggers: tuple[str, ...] = ("ordergrad_trl", "datasets")):
    """Hold back warnings, and the records of these loggers, raised inside; show them only if the block succeeds: on
    bad input the error is the one line printed, not the third of three. Nests: an inner block hands its records to
    the outer one."""
    held = [logging.getLogger(name) for name in loggers]
    saved = [(log.handlers[:], log.propagate) for log in held]
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    for log in held:
        log.handlers, log.propagate = [handler], False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            yield
    finally:
        for log, (handlers, propagate) in zip(held, saved):
            log.handlers, log.propagate = handlers, propagate
    for record in records:  # only reached without an error
        logging.getLogger(record.name).handle(record)
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@contextmanager
def quiet_progress(local: bool):
    """No datasets progress bars while a local file or built-in set loads (a second at most; on an error they would
    be lines before the one error line); a Hub download keeps them."""
    import datasets

    was = datasets.are_progress_bars_disabled()
    if local:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if local and not was:
            datasets.enable_progress_bars()
