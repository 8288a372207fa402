"""The layers hold (docs/layout.md): imports run one way, from the entry points down to the settings, as the
import-linter `layers` contract in pyproject.toml says; and no import of another brokerbench package hides inside a
function, where the contract and a reader would miss it, except where ALLOWED says why."""

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = REPO / "functions"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")  # import-linter's command (requirements-dev.txt)

# Function-level imports of another brokerbench package that are there on purpose: importer (a package or a
# module, with everything under it) -> why.
ALLOWED = {
    "brokerbench.cli": "the command line imports what a command needs when it runs, so `brokerbench --help` and "
                       "a mistyped option answer at once",
}


def test_imports_follow_the_layers():
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", str(REPO / "pyproject.toml")],
                          cwd=FUNCTIONS, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(FUNCTIONS)})
    assert done.returncode == 0, ("an import runs up the layers (pyproject.toml, [tool.importlinter]):\n"
                                  + done.stdout + done.stderr)
    assert "1 kept, 0 broken" in done.stdout, done.stdout


def module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(FUNCTIONS).with_suffix("").parts)
    package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if package else parts), package


def imported(node: ast.ImportFrom | ast.Import, module: str, package: bool) -> list[str]:
    """The absolute names an import statement imports from."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not node.level:
        return [node.module]
    base = module.split(".") if package else module.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return [".".join(base + ([node.module] if node.module else []))]


def top_package(module: str) -> str:
    """brokerbench.brokers.kafka.driver -> brokerbench.brokers; handlers.api -> handlers."""
    return ".".join(module.split(".")[:2]) if module.startswith("brokerbench.") else module.split(".")[0]


def function_level_imports(module: str, package: bool, source: str) -> list[tuple[str, int, str]]:
    """(importer, line, imported) for each brokerbench import inside a function of `module` (its `source`) that
    reaches another package than the importer's."""
    found = []
    for function in ast.walk(ast.parse(source, module)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found += [(module, node.lineno, name) for name in imported(node, module, package)
                          if name.split(".")[0] == "brokerbench" and top_package(name) != top_package(module)]
    return found


def allowed(importer: str) -> bool:
    return any(importer == prefix or importer.startswith(prefix + ".") for prefix in ALLOWED)


def test_no_import_of_another_package_hides_in_a_function():
    sources = sorted([*(FUNCTIONS / "brokerbench").rglob("*.py"), *(FUNCTIONS / "handlers").rglob("*.py")])
    hidden = [f"{importer}:{line} imports {name}" for path in sources
              for importer, line, name in function_level_imports(*module_name(path), path.read_text())
              if not allowed(importer)]
    assert not hidden, ("imports inside functions (move them to the top of the module; an import inside a function "
                        "is for an optional library, never to dodge a cycle):\n" + "\n".join(hidden))


def test_the_check_tells_a_function_level_import_of_another_package_from_its_own_and_the_top_level():
    source = ("from ..events import make_event\n\n\ndef f():\n    from ..reports import model\n"
              "    from . import cell\n    import json\n    from brokerbench.spec import lanes\n")
    assert function_level_imports("brokerbench.worker.probe", False, source) == [
        ("brokerbench.worker.probe", 5, "brokerbench.reports"), ("brokerbench.worker.probe", 8, "brokerbench.spec")]
    assert function_level_imports("brokerbench.brokers.kafka", True, "def f():\n    from .driver import D\n") == []
