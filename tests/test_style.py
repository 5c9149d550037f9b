"""The style is checked, not hoped for: the linter (ruff, configured in pyproject.toml: lines of at
most 100 characters, one statement a line, no named lambdas, no unused names) and the line budget
of DESIGN.md's "Package layout": a core read in one evening, one idea a module."""
import ast
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "minispec"


def lines(path):
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_linter_passes_on_package_tests_scripts_and_benchmarks():
    ruff = shutil.which("ruff") or pytest.skip("ruff is not installed: pip install -e '.[test]'")
    done = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_core_fits_the_budget_and_every_module_is_one_idea():
    core = sum(lines(p) for p in PACKAGE.glob("*.py"))
    assert core <= 1050, f"the core (minispec/*.py) has {core} lines, budget 1,050"
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(ROOT)
        assert lines(path) <= 250, f"{name}: {lines(path)} lines (one idea a module: < 250)"
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert len(line) <= 100, f"{name}:{i} is {len(line)} characters"


def test_the_core_imports_no_subpackage():
    """The core stands alone, and nothing imports in a cycle: no core module (bar __init__ and
    __main__) imports a subpackage at its top; only the loops hand a list of prompts to
    minispec.batch.loop, inside the call. The subpackages import the core, never the reverse."""
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert {"methods", "batch", "kit", "bridge"} <= subpackages
    for path in PACKAGE.glob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):  # re-exports; the demo's entry
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                top = (node.module or "").split(".")[0]
                names = [a.name for a in node.names]
                assert top not in subpackages and not set(names) & subpackages, (path.name, top)
        lazy = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1
                and (n.module or "").split(".")[0] in subpackages and n not in tree.body]
        assert all(n.module == "batch.loop" for n in lazy), path.name
