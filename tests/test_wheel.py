"""What a notebook runs or shows comes with `pip install minispec`: the wheel is built from this
checkout and installed into a temporary folder, and from an empty folder, with only that install on
PYTHONPATH, every notebook's setup cell runs, every import in every notebook resolves, and every
model, head and text the notebooks load is found in the install. No notebook reaches for the
repository's other folders or the network (Colab's view: the notebooks alone, and the package).
"""
import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LOADERS = ("load_model", "load_heads", "load_drafter")


def code_cells(path):
    """The notebook's code cells, IPython magics (%pip, !...) turned into `pass`."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    sources = ["".join(c["source"]) for c in cells]
    return [re.sub(r"^(\s*)[%!].*$", r"\1pass", s, flags=re.M) for s in sources]


def guarded(tree):
    """The import nodes inside a `try` that catches ImportError (optional extras, the install)."""
    nodes = set()
    for node in ast.walk(tree):
        handlers = node.handlers if isinstance(node, ast.Try) else []
        if any(h.type is not None and "ImportError" in ast.unparse(h.type) for h in handlers):
            nodes |= {n for stmt in node.body for n in ast.walk(stmt)
                      if isinstance(n, (ast.Import, ast.ImportFrom))}
    return nodes


def plan(path):
    """-> {"setup": the first code cell after the install cell, "imports": [(statement, optional)],
    "loads": [(loader, name)]}: every import of every cell, every model/heads/drafter named."""
    cells = code_cells(path)
    imports, loads = [], []
    for source in cells:
        tree = ast.parse(source)
        optional = guarded(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imports.append((ast.unparse(node), node in optional))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in LOADERS:
                names = [a.value for a in node.args if isinstance(a, ast.Constant)]
                loads += [(node.func.attr, name) for name in names if isinstance(name, str)]
    return {"setup": cells[1], "imports": imports, "loads": sorted(set(loads))}


RUNNER = r'''
import json, os, sys, traceback
import matplotlib
matplotlib.use("Agg")
import minispec as ms
plans, site = json.load(open(sys.argv[1])), sys.argv[2]
problems = [] if ms.__file__.startswith(site) else [f"minispec imported from {ms.__file__}"]
target = ms.load_model("target")
loaders = {"load_model": ms.load_model, "load_drafter": lambda name: ms.load_drafter(name, target),
           "load_heads": lambda name: ms.load_heads(target, name)}
for name, p in plans.items():
    try:
        exec(compile(p["setup"], f"{name}: setup cell", "exec"), {})
    except ModuleNotFoundError as e:
        # SmolLM2's wheel or [real] extra, which the notebook's install cell adds: optional here
        if os.environ.get("MINISPEC_REQUIRE_REAL") or "SmolLM2" not in str(e):
            problems.append(f"{name}: setup cell: " + traceback.format_exc(limit=-3))
    except Exception:
        problems.append(f"{name}: setup cell: " + traceback.format_exc(limit=-3))
    for statement, optional in p["imports"]:
        try:
            exec(statement, {})
        except ImportError as e:
            if not optional or "minispec" in statement:
                problems.append(f"{name}: {statement}: {e!r}")
    for loader, what in p["loads"]:
        try:
            loaders[loader](what)
        except Exception as e:
            problems.append(f"{name}: {loader}({what!r}): {e!r}")
print(json.dumps(problems))
'''


def setuptools_major():
    return int(importlib.metadata.version("setuptools").split(".")[0])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """Build the wheel from a copy of the package's sources, install it into a folder of its own:
    -> (the wheel's path, the install folder)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT / "minispec", src / "minispec",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    isolation = []  # without setuptools 77 here (the SPDX license), pip fetches it from the index
    if importlib.util.find_spec("setuptools") and setuptools_major() >= 77:
        isolation = ["--no-build-isolation"]  # build with the setuptools installed here, offline
    subprocess.run(pip + ["wheel", "--no-deps", *isolation, "-w", str(tmp / "dist"), str(src)],
                   check=True, capture_output=True)
    (whl,) = (tmp / "dist").glob("minispec-*.whl")
    subprocess.run(pip + ["install", "--no-deps", "--target", str(tmp / "site"), str(whl)],
                   check=True, capture_output=True)
    return whl, tmp / "site"


def test_the_wheel_holds_every_file_of_the_package(wheel):
    """Every file git tracks under minispec/ (code, weights, model card, shipped text) is in it."""
    done = subprocess.run(["git", "ls-files", "minispec"], cwd=ROOT, capture_output=True, text=True)
    tracked = set(done.stdout.split()) if done.returncode == 0 else set()
    if not tracked:
        pytest.skip("not a git checkout: no list of the package's files to compare with")
    names = set(zipfile.ZipFile(wheel[0]).namelist())
    assert tracked <= names, sorted(tracked - names)


def test_every_notebook_runs_its_setup_and_imports_from_the_wheel_in_an_empty_folder(wheel,
                                                                                     tmp_path):
    """From an empty folder, with only the install on PYTHONPATH (the editable checkout behind it
    is not used: asserted): each notebook's setup cell runs, each import in each cell resolves (an
    import guarded by `except ImportError`, an optional extra, may fail, unless it is minispec's),
    and each load_model / load_heads / load_drafter name in the notebooks loads. A setup cell
    that loads SmolLM2 may miss its wheel or extra (the notebook's install cell adds them), unless
    MINISPEC_REQUIRE_REAL is set, as in CI."""
    plans = {path.stem: plan(path) for path in NOTEBOOKS}
    assert all(p["imports"] and p["setup"] for p in plans.values())
    assert {what for p in plans.values() for _, what in p["loads"]} >= {"target", "draft"}
    empty = tmp_path / "empty"
    empty.mkdir()
    spec = tmp_path / "plans.json"
    spec.write_text(json.dumps(plans))
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    env = dict(os.environ, PYTHONPATH=str(wheel[1]), MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, str(runner), str(spec), str(wheel[1])], cwd=empty,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    problems = json.loads(done.stdout.splitlines()[-1])
    assert not problems, "\n".join(problems)
    assert not any(empty.iterdir()), "a notebook's setup wrote files into the folder it ran in"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_notebook_reaches_outside_the_package(path):
    """No cell fetches code or reads the repository's scripts: no '../scripts', no raw GitHub
    files, no urlopen / urlretrieve, no sys.path edits."""
    cells = json.loads(path.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells)
    for needle in ("../scripts", "raw.githubusercontent", "urlopen", "urlretrieve", "sys.path"):
        assert needle not in text, f"{path.name} contains {needle!r}"
