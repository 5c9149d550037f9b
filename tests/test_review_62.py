"""Stop 62: two methods' bad input left from stop 61's bug hunt. Each test below failed on the code
before its fix (a guess outside the vocabulary, a ValueError where a draft of nothing was asked)."""
import pytest
import torch

import minispec as ms
from minispec.methods import LayerSkipDrafter, Lookahead
from minispec.methods.args import draft_args


def tiny_gpt(n_layer=1):
    torch.manual_seed(0)
    config = ms.GPTConfig(vocab_size=5, block_size=32, n_layer=n_layer, n_head=1, n_embd=8)
    return ms.GPT(config).eval()


def test_lookahead_names_a_context_token_outside_its_models_vocabulary():
    """Lookahead guesses context tokens (its window starts as the last one repeated): called
    directly on id 300 of a 5-token model, it drafted 300 as a guess."""
    drafter = Lookahead(tiny_gpt())
    with pytest.raises(ValueError, match=r"token id 300 is outside the vocabulary \[0, 5\)"):
        drafter.draft([1, 300], 2)
    assert drafter.draft([1, 4], 2).tokens == [4, 4]  # the last token, repeated: in the vocabulary
    with pytest.raises(ValueError, match="outside the vocabulary"):
        draft_args([0, 5], 1, vocab=5)
    assert draft_args([0, 4], 1, vocab=5) == ([0, 4], 1)


def test_layer_skip_drafts_nothing_alike_with_its_set_given_or_searched():
    """A draft of 0 tokens is an empty tree whether the set was given or is still to be searched
    (the search ran on gamma 0 and raised); the search waits for the first draft of a token."""
    target = tiny_gpt(n_layer=4)
    ids = [1, 2, 3, 1, 2]
    given = LayerSkipDrafter(target, skip=[1])
    given.reset(target, target.new_cache())
    searched = LayerSkipDrafter(target)
    searched.reset(target, target.new_cache())
    assert given.draft(ids, 0).tokens == [] and searched.draft(ids, 0).tokens == []
    assert searched.skip is None  # not searched yet
    assert len(searched.draft(ids, 2).tokens) >= 1 and searched.skip is not None
