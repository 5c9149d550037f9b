"""Every notebook's exercises: each check accepts the reference solution and rejects wrong answers.

A notebook's check lives in a code cell whose first line is `# EXERCISE CHECK` (self-contained:
it imports what it needs). The reference solution `solution`, a plausible wrong answer `wrong` and,
where a review found more that slipped through (or the exercise names the classic mistakes),
`more_wrong` live in notebooks/solutions/<notebook>.py, out of the reader's sight. A notebook with
more than one exercise labels the others: `# EXERCISE CHECK: rule` goes with `solution_rule`,
`wrong_rule` and `more_wrong_rule`.
"""
import importlib.util
import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
MARK = "# EXERCISE CHECK"


def check_cells(path):
    """{label: source} of the notebook's check cells: '' for `# EXERCISE CHECK`, 'rule' for
    `# EXERCISE CHECK: rule`."""
    found = {}
    for cell in json.loads(path.read_text())["cells"]:
        source = "".join(cell["source"])
        first = source.split("\n", 1)[0]
        if cell["cell_type"] != "code" or not first.startswith(MARK):
            continue
        label = first[len(MARK):].lstrip(":").strip()
        assert label == "" or label.isidentifier(), f"{path.name}: bad exercise label {label!r}"
        assert label not in found, f"{path.name}: two checks labelled {label!r}"
        found[label] = source
    return found


def solutions(path):
    solution = path.parent / "solutions" / f"{path.stem}.py"
    spec = importlib.util.spec_from_file_location(path.stem, solution)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXERCISES = [(path, label) for path in NOTEBOOKS for label in check_cells(path)]


def test_every_notebook_has_an_exercise():
    assert [p.name for p in NOTEBOOKS if not check_cells(p)] == []


@pytest.mark.parametrize("path, label", EXERCISES,
                         ids=[p.stem + (f":{label}" if label else "") for p, label in EXERCISES])
def test_exercise_check_accepts_the_solution_and_rejects_a_wrong_answer(path, label):
    source = check_cells(path)[label]
    namespace = {}
    exec(compile(source, f"{path.name}: check cell {label}", "exec"), namespace)
    sol = solutions(path)
    suffix = f"_{label}" if label else ""
    assert namespace["check"](getattr(sol, "solution" + suffix)) is True
    wrongs = [getattr(sol, "wrong" + suffix)] + getattr(sol, "more_wrong" + suffix, [])
    for wrong in wrongs:  # more_wrong: a review's answers, or the exercise's classic mistakes
        try:
            namespace["check"](wrong)
        except AssertionError:
            continue
        pytest.fail(f"the check did not reject {wrong.__name__}: {wrong.__doc__}")

    def stub(*args, **kwargs):
        raise NotImplementedError("your code here")
    assert namespace["check"](stub) is False  # the unsolved stub is "not solved yet", not an error


@pytest.mark.parametrize("path, label", EXERCISES,
                         ids=[p.stem + (f":{label}" if label else "") for p, label in EXERCISES])
def test_an_answer_that_returns_none_is_told_so(path, label):
    """A body written without its `return` gives None: the check rejects it with an
    AssertionError that names the problem (here: a None, or notebook 00's forwards never run),
    not a TypeError from deep inside the check."""
    namespace = {}
    exec(compile(check_cells(path)[label], f"{path.name}: check cell {label}", "exec"), namespace)

    def returns_none(*args, **kwargs):
        return None
    with pytest.raises(AssertionError):
        namespace["check"](returns_none)
