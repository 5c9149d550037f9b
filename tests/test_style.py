"""The style is checked, not hoped for: the linter (ruff, configured in pyproject.toml: lines of at
most 100 characters, one statement a line, no named lambdas, no unused names) and the line budget
of DESIGN.md's "Package layout": a core read in one evening, one idea a module."""
import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "minispec"


def lines(path):
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_linter_passes_on_package_tests_scripts_and_benchmarks():
    """ruff from this Python's environment (the [test] extra), not the PATH's: `venv/bin/python
    -m pytest` without the venv activated used to skip this test."""
    assert importlib.util.find_spec("ruff"), "ruff is not installed: pip install -e '.[test]'"
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_core_fits_the_budget_and_every_module_is_one_idea():
    core = sum(lines(p) for p in PACKAGE.glob("*.py"))
    assert core <= 1050, f"the core (minispec/*.py) has {core} lines, budget 1,050"
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(ROOT)
        assert lines(path) <= 250, f"{name}: {lines(path)} lines (one idea a module: < 250)"
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert len(line) <= 100, f"{name}:{i} is {len(line)} characters"


def module_name(path):
    """minispec/batch/loop.py -> minispec.batch.loop; minispec/kit/__init__.py -> minispec.kit."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph():
    """{module: the package's modules it imports, at its top or inside a function}. Importing
    minispec.methods.fallback runs minispec/methods/__init__.py first: a subpackage counts too,
    but not the packages a module sits in (they are imported before it) nor minispec itself (its
    __init__ only re-exports)."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = here.rsplit(".", node.level - 1)[0] if node.level else ""
                target = ".".join(x for x in (base, node.module) if x)
                found = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            for full in found:  # each module named, and the subpackages above it
                parts = full.split(".")
                graph[name] |= {m for i in range(2, len(parts) + 1)
                                if (m := ".".join(parts[:i])) in paths
                                and not (name + ".").startswith(m + ".")}
    return graph


def find_cycle(graph):
    """A list of modules that import each other in a circle, or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None
    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_nothing_imports_in_a_cycle():
    """DESIGN.md: "no import cycles". Every import counts, a lazy one inside a function too (the
    loops hand a list of prompts to minispec.batch.loop inside the call: fine, as long as nothing
    there imports the loops back; what both share lives in minispec.rounds)."""
    graph = import_graph()
    assert "minispec.rounds" in graph["minispec.batch.loop"]
    assert "minispec.batch.loop" in graph["minispec.speculate"]  # the lazy dispatch is seen
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
    graph["minispec.batch.loop"].add("minispec.speculate")  # the old cycle, put back: caught
    cycle = find_cycle(graph)
    assert cycle[0] == cycle[-1] and {"minispec.speculate", "minispec.batch.loop"} <= set(cycle)


def test_the_core_imports_no_subpackage_at_its_top():
    """The core stands alone: no core module (bar __init__ and __main__) imports a subpackage at its
    top; the subpackages import the core, never the reverse (the loops' lazy dispatch to
    minispec.batch.loop is checked for cycles above)."""
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


def test_notebook_code_lines_fit_100_characters():
    """The linter reads no notebook: their code cells keep its 100 characters by this test (58 lines
    over it until stop 50)."""
    long = [(path.name, line) for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
            for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"
            for line in "".join(cell["source"]).splitlines() if len(line) > 100]
    assert not long, f"{len(long)} notebook code lines over 100 characters, the first: {long[0]}"
