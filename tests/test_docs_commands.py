"""Every command in README.md, eval/README.md and docs/*.md runs, as written, from a directory outside the repo.

Commands are parsed from the files' ```bash blocks (tests/helpers/docs_commands.py), so they cannot drift from what
users read. Each goes to the first handler whose pattern matches; a command that no handler knows fails
`test_every_command_has_a_handler`. Handlers change sizes only (steps, problems, samples, repeats, and the model:
the tiny test model); commands that need a GPU are checked without one, up to the point where a GPU is needed:
the launcher's arguments, its config file, and the recipe's full config parse and construction. Some entry points
have a dedicated test module that runs their documented commands with oracle checks; for those this module checks
that the module sees the same commands.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from helpers.docs_commands import REPO, Command, commands_in, doc_files, documented_commands
from helpers import bounded

COMMANDS = documented_commands()
# Relative paths in the docs are relative to the repo root; run from elsewhere they must be made absolute.
REPO_PATH = re.compile(r"^(recipes|studies|benchmarks|docs|accelerate_configs)/")
OFFLINE = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def absolute(argv) -> list[str]:
    return [str(REPO / a) if REPO_PATH.match(a) else a for a in argv]


def run(argv, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **OFFLINE, **(env or {})}
    full_env.pop("PYTHONPATH", None)  # the installed package, as users have it
    proc = bounded.run(argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def flag(argv, name: str, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


# ---------------------------------------------------------------------------------------------------- handlers


def check_pip(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
    """Installs are what CI itself runs (.ci/run); here: every extra named exists in pyproject.toml."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for word in cmd.argv[2:]:
        match = re.fullmatch(r"(?:-e )?\.\[([\w,-]+)\]", word)
        if match:
            unknown = set(match.group(1).split(",")) - set(extras)
            assert not unknown, f"{cmd}: extras {unknown} not in pyproject.toml ({sorted(extras)})"
    for pin in (word for word in cmd.argv if word.startswith("torch==")):  # torch pins are the ones CI installs
        assert pin in (REPO / ".ci" / "run").read_text(), cmd


def check_pytest(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
    """The README's test command is the one CI runs (not run again from inside the tests)."""
    ci = (REPO / ".ci" / "run").read_text()
    assert cmd.text in ci, f"{cmd} is not what .ci/run runs"


def _launch(cmd: Command):
    """(launcher args, script, script args) of an `accelerate launch` or `torchrun` command."""
    argv = list(cmd.argv)
    script = next(i for i, a in enumerate(argv) if a.endswith(".py"))
    return argv[:script], argv[script], argv[script + 1 :]


def _uses_gpu(launcher: list[str]) -> bool:
    if "--cpu" in launcher or launcher[0] == "torchrun":
        return False
    config_file = flag(launcher, "--config_file")
    return config_file is None or "use_cpu: true" not in (REPO / config_file).read_text()


def check_recipe_launch(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
    launcher, script, script_args = _launch(cmd)
    assert script == "recipes/math_cvar.py", cmd
    if _uses_gpu(launcher):
        check_gpu_launch(launcher, script_args)
        return
    # CPU: run it, with sizes shrunk (1 step, 2 eval problems, short completions, the tiny model)
    shrink = ["--model_name_or_path", str(tiny_model_dir), "--max_steps", "1", "--max_completion_length", "8",
              "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
              "--max_eval_samples", "2", "--num_generations_eval", "2", "--output_dir", str(tmp_path / "out")]  # fmt: skip
    if launcher[:2] == ["accelerate", "launch"]:
        launcher = [sys.executable, "-m", "accelerate.commands.launch", *launcher[2:]]
    proc = run([*absolute(launcher), str(REPO / script), *absolute(script_args), *shrink], tmp_path, dict(cmd.env))
    assert "Model saved to" in proc.stdout, proc.stdout[-2000:]
    # pass@1 with a 95% CI over the 2 eval problems, before and after, and the paired change
    assert "eval math reward (pass@1, 2 problems x 2 samples, 95% CI):" in proc.stdout, proc.stdout[-2000:]
    assert "after; change" in proc.stdout
    if not script_args:  # the quickstart: Top-2@4 over N=8, and which groups carry signal
        assert "only groups with 1 to 5 successes get a learning signal" in proc.stdout
        assert "Learning is read from the paired eval change above" in proc.stdout  # not from the per-step reward
    assert (tmp_path / "out" / "model.safetensors").exists()
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())  # the per-step log, no checkpoints
    assert [row["step"] for row in state["log_history"] if "reward" in row] == [1]


def check_gpu_launch(launcher: list[str], script_args: list[str]) -> None:
    """Without a GPU: the launcher's arguments and config file load, and the recipe's config parses and builds
    (every OrderGradConfig check runs; bf16 is switched off only because a CPU-only machine refuses it)."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    launcher = [a.replace("$RANK", "0").replace("$MASTER_ADDR", "127.0.0.1") for a in launcher]
    args = launch_command_parser().parse_args(absolute(launcher[2:]) + ["recipes/math_cvar.py"])
    if args.config_file:
        load_config_from_file(args.config_file)
    recipe = _recipe_module()
    from trl import ModelConfig, TrlParser

    from ordergrad_trl import OrderGradConfig

    parser = TrlParser((recipe.MathScriptArguments, OrderGradConfig, ModelConfig))
    _, training_args, _ = parser.parse_args_and_config(absolute(script_args) + ["--bf16", "false", "--use_cpu", "true"])
    assert training_args.num_generations > max(s.k for s in training_args.ordergrad_plan.stages)


def _load(path: Path, name: str):
    """A script of the repo as a module (scripts are not importable by name)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recipe_module():
    return _load(REPO / "recipes" / "math_cvar.py", "math_cvar_docs")


def check_vllm_serve(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
    """GPU-only: TRL's `vllm-serve` script arguments parse (vLLM itself is not imported)."""
    from transformers import HfArgumentParser
    from trl.scripts.vllm_serve import ScriptArguments

    (args,) = HfArgumentParser(ScriptArguments).parse_args_into_dataclasses(list(cmd.argv[2:]))
    assert args.model


def check_gpu_smoke(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
    """GPU-only: the script parses (tests/test_gpu_smoke.py runs it with stand-ins for each part)."""
    bounded.run(["bash", "-n", str(REPO / cmd.argv[1])], check=True, timeout=60)


def check_script(shrink: list[str], expect: str | None = None, timeout: int = 600):
    def check(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
        extra = [str(tiny_model_dir) if a == "{tiny}" else str(tmp_path) if a == "{tmp}" else a for a in shrink]
        proc = run([sys.executable, *absolute(cmd.argv[1:]), *extra], tmp_path, dict(cmd.env), timeout)
        if expect:
            assert re.search(expect, proc.stdout), proc.stdout[-2000:]

    return check


def delegated(module: str):
    """Entry points whose documented commands a dedicated module runs with oracle checks."""

    def check(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
        test_module = __import__(module)
        assert cmd in test_module.documented(), f"{module} does not run {cmd}"

    return check


def check_config_reference(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
    """In this process (TRL is imported already): with --check it only compares docs/config.md with the code."""
    import difflib

    module = _load(REPO / cmd.argv[1], "generate_config_reference")

    diff = difflib.unified_diff(module.OUT.read_text().splitlines(), module.render().splitlines(), lineterm="")
    assert module.main([*cmd.argv[2:], "--check"]) == 0, "docs/config.md is stale:\n" + "\n".join(diff)


def check_summarize(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
    # the committed units, summarized into a copy so that the committed summary is not rewritten by a test
    import shutil

    name = Path(flag(cmd.argv, "--assets_dir", "studies/assets/compare_objectives")).name
    assets = tmp_path / "assets"  # with its siblings: the reruns (`<name>_repro/`) and the failures file it reports
    shutil.copytree(REPO / "studies" / "assets", assets)
    for report in (assets / f"{name}.md", assets / f"{name}.json"):
        report.unlink()
    argv = absolute(cmd.argv[1:3])  # the script and --summarize; --assets_dir is the copy
    run([sys.executable, *argv, "--assets_dir", str(assets / name)], tmp_path)
    assert (assets / f"{name}.json").is_file()
    committed = (REPO / "studies" / "assets" / f"{name}.md").read_text()
    assert (assets / f"{name}.md").read_text() == committed, f"the committed summary is stale: {cmd.text}"


def check_unit_cost(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
    """docs/benchmarks.md's unit-cost commands, shrunk (--smoke, the tiny model) into tmp_path; the vLLM one where
    vLLM is installed (CI's vLLM venv; its CPU build needs a model of head size 64, tests/test_vllm_cpu_eval.py)."""
    import importlib.util

    backend = flag(cmd.argv, "--eval_backend")
    if backend == "vllm" and importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed: the vLLM eval runs in CI's vLLM step")
    argv = [tmp_path / a if a.startswith("cost/") else a for a in absolute(cmd.argv[1:])]
    proc = run([sys.executable, *map(str, argv), "--smoke", "--model_name_or_path", str(tiny_model_dir)], tmp_path)
    unit = json.loads((tmp_path / flag(cmd.argv, "--assets_dir") / "rloo-s40.json").read_text())
    assert unit["eval_backend"] == backend and unit["eval_wall_s"] > 0, proc.stdout[-2000:]


def check_frontier(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
    """The committed units (and reruns) copied, the report rebuilt there: it must equal the committed one."""
    import shutil

    sys.path.insert(0, str(REPO / "studies"))
    from objective_frontier import REPROS, SOURCES

    assets = tmp_path / "assets"
    for folder in (*SOURCES, *REPROS):
        if (REPO / "studies" / "assets" / folder).is_dir():
            shutil.copytree(REPO / "studies" / "assets" / folder, assets / folder)
    run([sys.executable, *absolute(cmd.argv[1:]), "--assets_dir", str(assets)], tmp_path)
    committed = (REPO / "studies" / "assets" / "objective_frontier.md").read_text()
    assert (assets / "objective_frontier.md").read_text() == committed, "stale: python studies/objective_frontier.py"


def check_calibration(cmd: Command, tmp_path: Path, tiny_model_dir) -> None:
    """The digits20 calibration rebuilt from the committed validation units into tmp_path: equal to the committed one."""
    run([sys.executable, *absolute(cmd.argv[1:]), "--out", str(tmp_path / "digits20_calibration")], tmp_path)
    committed = (REPO / "studies" / "assets" / "digits20_calibration.md").read_text()
    assert (tmp_path / "digits20_calibration.md").read_text() == committed, "stale: python studies/task_calibration.py"


HANDLERS = [
    (r"pip install\b", check_pip),
    (r"python -m pytest\b", check_pytest),
    (r"(accelerate launch|torchrun)\b.* recipes/math_cvar\.py\b", check_recipe_launch),
    (r"trl vllm-serve\b", check_vllm_serve),
    (r"bash benchmarks/gpu_smoke\.sh$", check_gpu_smoke),
    (r"ordergrad-eval plan\b", delegated("test_signal")),
    (r"(ordergrad-eval \w+|python (-m eval\.\w+|benchmarks/eval_throughput\.py))\b",
     delegated("test_eval_docs_commands")),
    (r"python benchmarks/trl_suite/run\.py\b", delegated("test_trl_suite")),
    (r"python benchmarks/grad_norms\.py\b", delegated("test_grad_norms")),
    (r"python studies/compare_objectives\.py$", delegated("test_compare_objectives")),
    (r"python studies/compare_objectives\.py --summarize"
     r"( --assets_dir studies/assets/compare_(objectives_(replication|headtohead)|crossover))?$", check_summarize),
    (r"python studies/compare_objectives\.py --units rloo-s40 --eval_backend (hf|vllm) ", check_unit_cost),
    (r"python studies/objective_frontier\.py$", check_frontier),
    (r"python studies/task_calibration\.py$", check_calibration),
    (r"python studies/signal_check\.py$", delegated("test_signal_check")),
    (r"python benchmarks/signal_plan\.py\b", check_script(["--repeats", "2", "--quick"], r"plan / baseline")),
    (r"python benchmarks/advantage_speed\.py$", check_script(["--repeats", "1", "--quick"], r"ours / GRPO")),
    (r"python benchmarks/table_build\.py$", check_script(["--repeats", "1", "--quick"], r"first / warm")),
    (r"python benchmarks/prompt_weight_speed\.py$", check_script(["--repeats", "3", "--quick"], r"curverl / none")),
    (r"python benchmarks/maj_speed\.py$", check_script(["--quick"])),
    (r"python benchmarks/reward_speed\.py\b", check_script(["--items", "16"])),
    (r"python benchmarks/trainer_step\.py$", check_script(["--rounds", "1", "--steps", "2", "--warmup", "0"])),
    (r"python benchmarks/unit_train_cost\.py$",
     check_script(["--rounds", "1", "--steps", "2", "--model", "{tiny}"], r"\| step \| [\d.]+ \| [\d.]+ \|")),
    (r"python benchmarks/dynamic_sampling\.py$",
     check_script(["--steps", "1", "--model", "{tiny}", "--max-completion-length", "8", "--output_dir", "{tmp}"],
                  r"refill: [\d.]+ s over 1 steps")),
    (r"python studies/bandit_diagnostic\.py$", check_script(["--steps", "3", "--seeds", "1", "--output_dir", "{tmp}"])),
    (r"python docs/generate_config_reference\.py$", check_config_reference),
    (r"python docs/prompt_weight_bias\.py$", check_script(["--check"])),
    (r"python -m verl\.trainer\.main_ppo\b|bash recipes/verl/", delegated("test_verl_docs")),
    (r"python recipes/verl/prepare_math\.py\b", delegated("test_verl_docs")),
    (r"python -m (ordergrad_trl\.integrations\.skyrl|skyrl\.train\.entrypoints\.main_base)\b", delegated("test_skyrl")),
]


def handler_of(cmd: Command):
    line = " ".join(cmd.argv)
    return next((h for pattern, h in HANDLERS if re.match(pattern, line)), None)


def test_every_command_has_a_handler():
    assert len({c.doc for c in COMMANDS}) >= 5, "the docs parser found commands in too few files"
    unknown = [str(c) for c in COMMANDS if not c.inline and handler_of(c) is None]
    assert not unknown, "documented commands no test runs:\n" + "\n".join(unknown)


def test_inline_script_commands_are_also_in_a_bash_block():
    """Prose may name a command in `code`; a runnable script command must then also appear in a bash block."""
    blocks = {c.argv for c in COMMANDS if not c.inline}
    loose = [str(c) for c in COMMANDS if c.inline and re.match(r"python \S+\.py", " ".join(c.argv))
             and c.argv not in blocks]  # fmt: skip
    assert not loose, "run these from a ```bash block so the docs test covers them:\n" + "\n".join(loose)


def test_readme_is_a_landing_page():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move reference material to docs/"
    for doc in doc_files():  # every relative link resolves, and so does its #anchor
        text = (REPO / doc).read_text()
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path = (REPO / doc).parent.joinpath(target) if target else REPO / doc
            assert path.exists(), f"{doc}: broken link {target}"
            if anchor and path.suffix == ".md":
                assert anchor in _anchors(path.read_text()), f"{doc}: no heading for #{anchor} in {path.name}"


def test_troubleshooting_contents_list_every_section():
    text = (REPO / "docs" / "troubleshooting.md").read_text()
    listed = set(re.findall(r"^- \[.*\]\(#([^)]+)\)$", text, flags=re.M))
    assert listed == _anchors(text) - {"troubleshooting"}


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens (code blocks skipped)."""
    prose = re.sub(r"^ *```.*?^ *```", "", markdown, flags=re.S | re.M)  # fences open a line; inline ``` does not
    headings = re.findall(r"^#{1,6} +(.+?) *$", prose, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def _unique(commands: list[Command]) -> list[Command]:
    seen, out = set(), []
    for c in commands:  # the install line recurs in the quickstart and test lines: run each command once
        if not c.inline and (c.env, c.argv) not in seen:
            seen.add((c.env, c.argv))
            out.append(c)
    return out


@pytest.mark.parametrize("cmd", _unique(COMMANDS), ids=str)
def test_documented_command(cmd, tmp_path, tiny_model_dir):
    handler = handler_of(cmd)
    if handler is None:
        pytest.fail(f"no handler for {cmd}")
    cwd = tmp_path / "elsewhere"  # never the repo root
    cwd.mkdir()
    handler(cmd, cwd, tiny_model_dir)


def test_parser_sees_what_a_reader_sees():
    readme = commands_in("README.md")
    assert [c.argv[-1] for c in readme if c.argv[:2] == ("python", "-m")] == ["-q"]
    assert [c.argv[-1] for c in readme if c.argv[0] == "ordergrad-eval"] == ["runs/eval_cvar", "plan"]
    assert any(c.argv[:2] == ("accelerate", "launch") and "--cpu" in c.argv for c in readme)
    server = [c for c in readme if c.argv[:2] == ("trl", "vllm-serve")]
    assert server and dict(server[0].env) == {"CUDA_VISIBLE_DEVICES": "0"}
