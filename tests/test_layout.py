"""The package layout: three layers without import cycles, the kernel without TRL, the public imports unchanged,
one-line module summaries and files readable in one sitting."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from helpers import bounded

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "ordergrad_trl"
LAYERS = {"core": 0, "tasks": 1, "evaluation": 2, "integrations": 2, "training": 3}  # see ordergrad_trl/__init__
MAX_LINES = 400
OWN_SOURCES = ["ordergrad_trl", "eval", "recipes", "studies", "benchmarks", "docs"]


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """ordergrad_trl modules that `path` imports, at module level or inside functions."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            path = REPO / candidate.replace(".", "/")
            if candidate.startswith("ordergrad_trl") and (path.with_suffix(".py").is_file() or path.is_dir()):
                found.add(candidate)
    return found - {name}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def test_no_import_cycles():
    edges = graph()
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        for target in sorted(edges.get(node, ())):
            assert target not in path, "import cycle: " + " -> ".join(path[path.index(target) :] + [target])
            if target not in done:
                visit(target, path + [target])
        done.add(node)

    for node in sorted(edges):
        visit(node, [node])


def test_layers_import_only_downwards():
    for module, targets in graph().items():
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in LAYERS:
            continue
        for target in targets:
            tparts = target.split(".")
            if len(tparts) < 2 or tparts[1] not in LAYERS or tparts[1] == parts[1]:
                continue
            assert LAYERS[tparts[1]] < LAYERS[parts[1]], f"{module} imports {target}"


def test_core_imports_without_trl():
    code = (
        "import sys\n"
        "import ordergrad_trl\n"
        "from ordergrad_trl.core import advantage, estimators, objectives, pathwise, plan, schedule\n"
        "from ordergrad_trl import rank_weights, lstat_value, lstat_advantage\n"
        "heavy = [m for m in ('trl', 'transformers', 'datasets', 'accelerate') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    bounded.run([sys.executable, "-c", code], check=True, cwd=REPO.parent, timeout=300)


def test_public_imports_unchanged():
    import ordergrad_trl
    from ordergrad_trl import ObjectiveStage, OrderGradConfig, OrderGradTrainer, lstat_advantage, lstat_value
    from ordergrad_trl import rank_weights
    from ordergrad_trl.core.schedule import ObjectiveStage as stage_class
    from ordergrad_trl.training import OrderGradConfig as config_class
    from ordergrad_trl.training import OrderGradTrainer as trainer_class

    assert (OrderGradConfig, OrderGradTrainer, ObjectiveStage) == (config_class, trainer_class, stage_class)
    assert callable(lstat_advantage) and callable(lstat_value) and callable(rank_weights)
    assert set(ordergrad_trl.__all__) >= {"OrderGradConfig", "OrderGradTrainer", "lstat_advantage", "rank_weights"}


def test_unknown_submodule_still_fails():
    with pytest.raises(ModuleNotFoundError):
        import ordergrad_trl.no_such_module  # noqa: F401


def test_no_file_is_copied_from_another_project():
    """Third-party code (e.g. TRL's tests) is read from its own checkout, never copied in (benchmarks/trl_suite)."""
    tracked = bounded.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, timeout=60)
    if tracked.returncode:
        pytest.skip("not a git checkout")
    marks = ("HuggingFace" + " Team", "Licensed under the" + " Apache License")  # split: not a match themselves
    copied = [name for name in tracked.stdout.splitlines() if name.endswith(".py") and (REPO / name).is_file()
              and any(mark in (REPO / name).read_text(errors="replace") for mark in marks)]  # fmt: skip
    assert not copied, f"files with another project's license header: {copied}"


def _own_python_files(dirs=OWN_SOURCES) -> list[Path]:
    files = [p for d in dirs for p in (REPO / d).rglob("*.py")]
    return [p for p in files if "__pycache__" not in p.parts]


def test_files_fit_one_sitting():
    files = _own_python_files([*OWN_SOURCES, "tests"])
    long = {str(p.relative_to(REPO)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines: {long}"


def _assert_one_line_summary(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    where = path.relative_to(REPO)
    assert doc, f"{where} has no module docstring"
    lines = doc.strip("\n").splitlines()
    assert lines[0].strip(), f"{where}: the docstring must start with its summary line"
    assert len(lines) == 1 or not lines[1].strip(), f"{where}: the summary must fit on one line"


def test_every_module_opens_with_a_one_line_summary():
    for path in _own_python_files():
        _assert_one_line_summary(path)


def test_the_layout_map_names_every_module_in_its_folder():
    """docs/development.md's package map is written by hand, so this derives what it must name from the package: each
    module's file name within its top-level folder's section (a new module fails here until it has a line), and no
    file name the package lacks."""
    block = (REPO / "docs" / "development.md").read_text().split("```text\nordergrad_trl/\n")[1].split("\neval/")[0]
    sections, folder = {}, ""
    for line in block.splitlines():
        if line.startswith("  ") and not line.startswith("   ") and line.split()[0].endswith("/"):
            folder = line.split()[0].rstrip("/")
        sections[folder] = sections.get(folder, "") + line + "\n"
    missing, stale = [], []
    for path in sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts):
        parts = path.relative_to(PACKAGE).parts
        folder = parts[0] if len(parts) > 1 else ""
        if not (path.name == "__init__.py" and folder) and path.name not in sections.get(folder, ""):
            missing.append(str(path.relative_to(REPO)))
    named = {word.strip("(),:;") for word in block.split() if word.strip("(),:;").endswith(".py")}
    stale = sorted(name for name in named if not any(PACKAGE.rglob(name)))
    assert not missing, f"docs/development.md's layout map does not name {missing}"
    assert not stale, f"docs/development.md's layout map names modules the package lacks: {stale}"


def test_tests_folder_holds_tests_and_one_helpers_package():
    """Shared test code lives in tests/helpers/ (a package, each module summarised), not beside the test files."""
    tests = REPO / "tests"
    stray = sorted(p.name for p in tests.glob("*.py") if not p.name.startswith("test_") and p.name != "conftest.py")
    assert not stray, f"helpers outside tests/helpers/: {stray}"
    assert (tests / "helpers" / "__init__.py").is_file()
    for path in _own_python_files(["tests/helpers"]):
        _assert_one_line_summary(path)


def test_every_declared_pytest_marker_marks_a_test():
    """A marker pyproject.toml declares (`-m "not slow"` in docs/development.md) selects something."""
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    sources = "\n".join(p.read_text() for p in _own_python_files(["tests"]))
    unused = [m for m in (d.split(":")[0] for d in declared) if f"pytest.mark.{m}" not in sources]
    assert not unused, f"markers declared in pyproject.toml that no test uses: {unused}"


def test_tests_start_commands_through_the_bounded_runner():
    """A test runs a command with `helpers.bounded.run` (its whole process tree ends with the call, a timeout
    required), never with `subprocess.run`/`call`/`check_*`, whose timeout leaves a launcher's workers running."""
    unbounded = {"run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
    found = []
    for path in _own_python_files(["tests"]):
        if path.name in ("bounded.py", "test_bounded.py"):  # the helper, and its test against subprocess.run
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            func = getattr(node, "func", None)
            named = isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "subprocess"
            if named and func.attr in unbounded:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} subprocess.{func.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "subprocess":
                found += [f"{path.relative_to(REPO)}:{node.lineno} from subprocess import {a.name}"
                          for a in node.names if a.name in unbounded]
    assert not found, f"use helpers.bounded.run instead: {found}"
