"""The course's reading budget (issue 31, item 7): one sitting a notebook.

Reading time is counted the way the review that asked for it counted: markdown words at 180 a
minute, plus code at 10 non-blank lines a minute, code being the notebook's code cells and the
package source its `show(...)` cells print. Bars: no notebook over 45 minutes; notebooks 00-10
(the course before the real model) at most 20,000 markdown words together."""
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
WORDS_PER_MINUTE, CODE_LINES_PER_MINUTE = 180, 10
MAX_MINUTES, MAX_COURSE_WORDS = 45, 20_000


def lines(text):
    return sum(1 for line in text.splitlines() if line.strip())


def budget(path):
    """-> (markdown words, code lines read, minutes)."""
    words = code = 0
    for cell in json.loads(path.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            words += len(source.split())
        if cell["cell_type"] != "code":
            continue
        code += lines(source)
        if re.search(r"(^|\W)show\(", source):  # the package's own code, printed to be read
            code += sum(lines("".join(out.get("text", ""))) for out in cell.get("outputs", [])
                        if out.get("output_type") == "stream")
    return words, code, words / WORDS_PER_MINUTE + code / CODE_LINES_PER_MINUTE


def test_budget_counts_words_code_and_shown_source(tmp_path):
    cell = {"cell_type": "code", "source": ["show(f)\n", "\n", "x = 1"],
            "outputs": [{"output_type": "stream", "text": ["def f():\n", "    return 1\n"]}]}
    text = {"cell_type": "markdown", "source": ["one two three"]}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": [text, cell]}))
    assert budget(path) == (3, 4, 3 / 180 + 4 / 10)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_one_sitting(path):
    words, code, minutes = budget(path)
    assert minutes <= MAX_MINUTES, (f"{path.name}: {minutes:.0f} min to read ({words} words, "
                                    f"{code} code lines), over {MAX_MINUTES}")


def test_course_words():
    course = [p for p in NOTEBOOKS if p.name[:2] <= "10"]
    words = sum(budget(p)[0] for p in course)
    assert words <= MAX_COURSE_WORDS, f"00-10: {words} markdown words, over {MAX_COURSE_WORDS:,}"
