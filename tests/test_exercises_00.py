"""Notebook 00's exercise, "decode without a cache": its check watches what every forward is given.

The check must reject any decoder that reuses keys and values, however it reaches the model (the
package's loop, a cache built by hand, the lower-level features/blocks calls, a model of its own),
accept a right answer however it calls the model, and say nothing of how to solve it.
"""
import json
from pathlib import Path

import pytest
import torch

from minispec.model import KVCache

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "00_why_decoding_is_slow.ipynb"


def check_source():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    found = [c for c in cells if c["cell_type"] == "code"
             and "".join(c["source"]).startswith("# EXERCISE CHECK")]
    assert len(found) == 1
    return "".join(found[0]["source"])


@pytest.fixture(scope="module")
def check():
    namespace = {}
    exec(compile(check_source(), f"{NOTEBOOK.name}: check cell", "exec"), namespace)
    return namespace["check"]


def greedy(next_logits, ids, n):
    """Greedy decoding around next_logits(seq) -> (V,) logits for the token after seq."""
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(n):
            seq.append(int(next_logits(seq).argmax()))
    return seq[len(ids):]


def via_forward(model, ids, n):
    """Right: model.forward on the whole sequence (bypassing the GPT's __call__)."""
    return greedy(lambda seq: model.forward(torch.tensor([seq]))[0, -1], ids, n)


def via_features(model, ids, n):
    """Right: the head on the features, no cache."""
    return greedy(lambda seq: model.lm_head(model.features(torch.tensor([seq])))[0, -1], ids, n)


def features_with_cache(model, ids, n):
    """Wrong: features and lm_head, with a cache built by hand, new tokens only."""
    cache, new, out = KVCache(model.config), list(ids), []
    with torch.inference_mode():
        for _ in range(n):
            logits = model.lm_head(model.features(torch.tensor([new]), cache))[0, -1]
            new = [int(logits.argmax())]
            out += new
    return out


def blocks_with_cache(model, ids, n):
    """Wrong: runs the blocks by hand on a hand-built cache (the lowest level that keeps K, V)."""
    cache, seq = KVCache(model.config), list(ids)
    with torch.inference_mode():
        for _ in range(n):
            new = seq[cache.length:]
            pos = torch.arange(cache.length, len(seq))
            x = model.blocks(model.embed(torch.tensor([new]), pos), cache)
            seq.append(int(model.lm_head(model.ln_f(x))[0, -1].argmax()))
    return seq[len(ids):]


def cache_keyword(model, ids, n):
    """Wrong: prefill once, then one token a step, the cache passed by keyword."""
    cache = model.new_cache()
    with torch.inference_mode():
        logits = model(torch.tensor([list(ids)]), cache=cache)[0, -1]
        out = [int(logits.argmax())]
        for _ in range(n - 1):
            out.append(int(model(torch.tensor([out[-1:]]), cache=cache)[0, -1].argmax()))
    return out


def extra_forward(model, ids, n):
    """Wrong: a right answer plus one wasted forward per step over the prompt alone."""
    def next_logits(seq):
        model(torch.tensor([list(ids)]))
        return model(torch.tensor([seq]))[0, -1]
    return greedy(next_logits, ids, n)


@pytest.mark.parametrize("fn", [via_forward, via_features], ids=lambda f: f.__name__)
def test_the_check_accepts_a_right_answer_however_it_calls_the_model(check, fn):
    assert check(fn) is True


@pytest.mark.parametrize("fn", [features_with_cache, blocks_with_cache, cache_keyword,
                                extra_forward], ids=lambda f: f.__name__)
def test_the_check_rejects_a_decoder_that_reuses_keys_and_values(check, fn):
    with pytest.raises(AssertionError):
        check(fn)


def test_the_check_cell_holds_no_solution():
    source = check_source()
    assert "argmax" not in source  # how to pick the token is the exercise, not the check's
    assert "last position" not in source.lower()
