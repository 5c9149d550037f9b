"""Stop 54: inputs the stop-53 notes left alone, now refused with messages that name the problem.
Each test fails on the code before its fix (a traceback, an UnpicklingError, a RuntimeError from
torch.stack, or a config accepted that breaks at the first forward).
"""
import pytest
import torch

import minispec as ms
from minispec.bridge.llama import LlamaConfig
from minispec.kit import training
from minispec.kit.demo import main
from minispec.methods.eagle import load_eagle
from minispec.methods.heads import load_heads
from minispec.methods.learned_stop import load_stop_head


@pytest.fixture(scope="module")
def pair():
    return ms.load_model("target"), ms.load_model("draft")


@pytest.mark.parametrize("flags, message", [
    (["--gamma", "0"], "gamma (draft length) must be an integer >= 1, got 0"),
    (["--top-p", "2"], "top_p must be in (0, 1] or None, got 2.0"),
    (["--temperature", "-1"], "temperature must be finite and >= 0"),
    (["", "--max-new-tokens", "4"], "the prompt is empty")])
def test_the_demo_reports_refused_flags_without_a_traceback(flags, message, capsys):
    argv = flags if flags[0] == "" else ["def ", "--max-new-tokens", "4"] + flags
    with pytest.raises(SystemExit) as exit_:  # the library's ValueError and its traceback before
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "Traceback" not in err
    assert err.startswith("usage: python -m minispec")


@pytest.mark.parametrize("change, match", [
    (dict(norm_eps=-1.0), "norm_eps >= 0"),
    (dict(norm_eps=float("nan")), "norm_eps >= 0"),
    (dict(rope_base=0.0), "rope_base > 0"),
    (dict(rope_base=float("inf")), "rope_base > 0"),
    (dict(rope_base="1e4"), "rope_base must be a number"),
    (dict(n_hidden=0), "n_hidden must be an integer >= 1")])
def test_a_llama_config_checks_its_numbers(change, match):
    with pytest.raises(ValueError, match=match):  # accepted before: NaN or a shape error later
        LlamaConfig(**change)
    LlamaConfig(norm_eps=0.0, rope_base=10)  # the edges that are fine


def test_a_file_that_is_not_a_drafters_weights_is_named(pair, tmp_path):
    target, _ = pair
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint")
    tensor = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), tensor)  # torch.save wrote it, but not a drafter's dict
    loads = [lambda path: load_heads(target, path), lambda path: load_eagle(target, path),
             load_stop_head]
    for load in loads:
        for path in (text, tensor, tmp_path):  # an UnpicklingError, a TypeError, an OSError
            with pytest.raises(ValueError, match=r"is not a drafter's weights file"):
                load(str(path))
    assert len(load_heads(target, "medusa").res) == 4  # the shipped files still load


def test_acceptance_rows_names_a_drafter_and_no_prompts(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="draft must be the draft model .*ModelDrafter"):
        training.acceptance_rows(target, ms.ModelDrafter(draft), [ms.encode("def f")], 0, 8, 4)
    with pytest.raises(ValueError, match="no drafted tokens to label from 0 prompts"):
        training.acceptance_rows(target, draft, [], 0, 8, 4)  # torch.stack's RuntimeError before
    features, labels, depths = training.acceptance_rows(target, draft, [ms.encode("def f")], 0,
                                                        8, 4)
    assert features.shape == (len(labels), 3) and len(depths) == len(labels) > 0


def test_readmes_pooled_lookup_table_is_the_figures(capsys):
    """README's table of the lookup runs, both with the 9 prompts as written and with the answer two
    of them share counted once, is what benchmarks/pool_lookup_runs.py reads off the figures."""
    import importlib.util
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("pool", root / "benchmarks/pool_lookup_runs.py")
    pool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pool)
    pool.main([])  # not pytest's own arguments (sys.argv)
    rows = {line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and "x |" in line}
    assert "| 27 | 1.30-1.58x | 1.410x | 4 | 1.290-1.505x, 1.375x, 3 |" in rows["lookup"]
    assert "| 14 | 1.38-1.62x | 1.525x |" in rows["edit lookup, match length"]
    assert "1.350-1.595x, 1.475x, 5 |" in rows["edit lookup, match length"]
    readme = (root / "README.md").read_text()
    assert "| 27 | 1.30-1.58x | 1.41x | 4 | 1.29-1.505x, 1.375x, 3 |" in readme
    assert "| 14 | 1.38-1.62x | 1.525x | 8 (before rounding) | 1.35-1.595x, 1.475x, 5 |" in readme
    with pytest.raises(ValueError, match="expected 9 copy prompts, found 1"):
        pool.prompt_table("| prompt | run 1 | median |\n|---|---|---|\n| Quote | 2.50 | 2.50 |")
