"""Findings of the reviews of stop 71, each test failing on the code before its fix."""
import sys

import pytest

import minispec as ms


class Appends(ms.Drafter):
    """A learner's slip: the drafter extends the context it was given, in place, while drafting."""

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context.append(0)  # unverified: it must not reach the output
        return ms.Tree.chain([])


class Pops(Appends):
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context.pop()  # the loop's p would have had a row too few (a ValueError about p's shape)
        return ms.Tree.chain([])


def test_a_drafter_that_changes_its_context_cannot_change_the_output():
    """The loop handed the drafter its own context list: an append entered the output without
    verification (greedy output [0, 125, 0, 125, ...] where generate writes [32] * 8)."""
    target = ms.load_model("target")
    ids = ms.encode("def fib(n):\n")
    want = ms.generate(target, ids, 8).tokens
    for drafter in (Appends(), Pops()):
        assert ms.speculative_generate(target, drafter, ids, 8, gamma=2).tokens == want
        sampled = ms.speculative_generate(target, drafter, ids, 8, temperature=1.0, seed=3)
        assert sampled.tokens == ms.generate(target, ids, 8, temperature=1.0, seed=3).tokens


BAD_OPTIONS = [("batching", ["--prompts", "0"], "--prompts: must be an integer >= 1"),
               ("batching", ["--prompts", "40"], "there are 32 prompts"),  # ran 32, said nothing
               ("batching", ["--prompts", "2", "--batches", "4"], "more than the 2 prompts"),
               ("long_context", ["--contexts", "128"], "needs one above 256"),  # ZeroDivisionError
               ("lookup_runs", ["--methods", "lookup", "lookup"], "names one twice"),
               ("real_model", ["--gamma", "0"], "--gamma: must be an integer >= 1"),
               ("real_model", ["--threads", "0"], "--threads: must be an integer >= 1"),
               ("bench", ["--temperatures", "-1"], "must be a finite number >= 0"),
               ("kernel_baseline", ["--out", "TMP"], "is a folder: give a file name")]


@pytest.mark.parametrize("name, argv, says", BAD_OPTIONS,
                         ids=[f"{n} {' '.join(a)}" for n, a, _ in BAD_OPTIONS])
def test_a_benchmark_refuses_a_bad_option_before_it_runs(script, monkeypatch, capsys, tmp_path,
                                                         name, argv, says):
    """The review of the benchmarks: these ran for minutes and then failed deep inside (or lost
    the results at the last line, or printed a wrong table); argparse now names the option."""
    argv = [str(tmp_path) if a == "TMP" else a for a in argv]
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])
    with pytest.raises(SystemExit) as stop:
        script(name).main()
    assert stop.value.code == 2 and says in capsys.readouterr().err


def test_a_benchmarks_output_folder_is_made_before_the_run(script, tmp_path):
    common = script("common")
    assert common.out_file(str(tmp_path / "new" / "k.md")) == str(tmp_path / "new" / "k.md")
    assert (tmp_path / "new").is_dir()  # a missing folder failed at the end, after the timing
    assert common.out_folder(str(tmp_path / "runs")) == tmp_path / "runs"
    assert (tmp_path / "runs").is_dir()


def test_before_after_says_why_git_failed(script, monkeypatch):
    """It raised CalledProcessError(128) and dropped git's own message."""
    monkeypatch.setattr(sys, "argv", ["before_after.py", "--old", "no-such-commit-here"])
    with pytest.raises(SystemExit, match="git archive no-such-commit-here failed: .+"):
        script("before_after").main()
