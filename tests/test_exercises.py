"""Every notebook's exercise: its check accepts the reference solution and rejects a wrong answer.

A notebook's check lives in a code cell whose first line is `# EXERCISE CHECK` (self-contained:
it imports what it needs). The reference solution `solution`, a plausible wrong answer `wrong` and,
where a review found more that slipped through, `more_wrong` live in
notebooks/solutions/<notebook>.py, out of the reader's sight.
"""
import importlib.util
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def check_cell(path):
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    found = [c for c in cells if "".join(c["source"]).startswith("# EXERCISE CHECK")]
    return "".join(found[0]["source"]) if found else None


def solutions(path):
    solution = path.parent / "solutions" / f"{path.stem}.py"
    spec = importlib.util.spec_from_file_location(path.stem, solution)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_exercise_check_accepts_the_solution_and_rejects_a_wrong_answer(path):
    source = check_cell(path)
    assert source is not None, f"{path.name} has no '# EXERCISE CHECK' cell"
    namespace = {}
    exec(compile(source, f"{path.name}: check cell", "exec"), namespace)
    sol = solutions(path)
    assert namespace["check"](sol.solution) is True
    for wrong in [sol.wrong] + getattr(sol, "more_wrong", []):  # more_wrong: a review's answers
        with pytest.raises(AssertionError):
            namespace["check"](wrong)

    def stub(*args, **kwargs):
        raise NotImplementedError("your code here")
    assert namespace["check"](stub) is False  # the unsolved stub is "not solved yet", not an error
