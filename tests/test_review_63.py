"""Stop 63: the core's bad input left open since stop 61 (the core was at its 1,050 lines; moving
is_batch to the batch's own module, minispec.batch.loop, made room). Each test below failed on the
code before its fix: an AttributeError, a TypeError, an IndexError, a KeyError or a shape error
from inside, or a bad size silently taken as the default."""
import numpy as np
import pytest
import torch

import minispec as ms
from minispec.batch.loop import is_batch


def tiny_gpt(n_embd=8, dtype=torch.float32):
    torch.manual_seed(0)
    config = ms.GPTConfig(vocab_size=5, block_size=32, n_layer=1, n_head=1, n_embd=n_embd)
    return ms.GPT(config).eval().to(dtype)


def test_probs_sample_and_verify_tree_take_lists_as_tensors():
    """probs([1.0, 2.0]) was an AttributeError (a list has no dtype), sample([.5, .5]) a
    TypeError from multinomial, verify_tree(tree, [[...], ...]) an AttributeError (no dim)."""
    assert torch.equal(ms.probs([0.0, 1.0, 2.0], 0.5), ms.probs(torch.tensor([0.0, 1.0, 2.0]), 0.5))
    assert torch.equal(ms.probs([0, 3, 1], 0), torch.tensor([0.0, 1.0, 0.0]))  # ints: greedy
    assert ms.probs([0, 1], 1.0).dtype == torch.float32  # integer logits: a float law
    assert ms.probs(torch.tensor([0.0, 1.0], dtype=torch.float64)).dtype == torch.float64
    assert ms.sample([0.0, 1.0, 0.0], torch.Generator().manual_seed(0)) == 1
    tree = ms.Tree([1], [-1])
    assert ms.verify_tree(tree, [[0.0, 1.0], [1.0, 0.0]]) == ([0], 0)  # kept 1, then the argmax 0
    with pytest.raises(ValueError, match=r"p must have shape \(1 \+ N, V\) = \(2, V\)"):
        ms.verify_tree(tree, [[0.0, 1.0]])


def test_verify_tree_names_a_node_token_outside_the_vocabulary():
    """A hand-built tree's token 7 against a 2-token p: an IndexError-free walk that could never
    keep it (it returned ([], 0) without a word); now named, as greedy_accept names it."""
    with pytest.raises(ValueError, match=r"each draft token must be an integer in \[0, 2\)"):
        ms.verify_tree(ms.Tree([7], [-1]), torch.eye(2))


def test_tree_select_names_nodes_it_cannot_keep():
    """select([5]) of a 2-node tree was an IndexError, select([1]) without its parent a KeyError."""
    tree = ms.Tree([1, 2, 3], [-1, 0, -1])
    with pytest.raises(ValueError, match=r"each node to keep \(of 3\) must be an integer in"):
        tree.select([5])
    with pytest.raises(ValueError, match="keep holds node 1 but not its parent 0"):
        tree.select([1, 2])
    sub = tree.select(np.array([2, 0]))  # numpy's ints, any order
    assert (sub.tokens, sub.parents) == ([1, 3], [-1, -1])


def test_model_drafter_reads_a_tensor_context_and_names_a_batch_or_a_fractional_gamma():
    """A tensor context was a TypeError from torch.tensor (0-d tensors in a list); gamma 2.5
    drafted 3 tokens."""
    drafter = ms.ModelDrafter(tiny_gpt())
    want = drafter.draft([1, 2, 3], 3).tokens
    assert drafter.draft(torch.tensor([1, 2, 3]), 3).tokens == want
    assert drafter.draft(np.array([1, 2, 3]), 3.0).tokens == want
    with pytest.raises(ValueError, match=r"each context token id .* got tensor\(\[1, 2, 3\]\)"):
        drafter.draft(torch.tensor([[1, 2, 3]]), 3)
    with pytest.raises(ValueError, match="gamma .* got 2.5"):
        drafter.draft([1, 2, 3], 2.5)


def test_prompt_lookup_names_a_fractional_gamma_or_depth():
    """PromptLookupDrafter.draft(ctx, 2.5) was a TypeError from range."""
    lookup = ms.PromptLookupDrafter(max_n=2)
    assert lookup.draft([5, 6, 7, 5], 2.0).tokens == [6, 7]
    for gamma, depth in [(2.5, None), (3, 1.5), (None, None)]:
        with pytest.raises(ValueError, match=r"gamma \(and depth\) must be an integer >= 0"):
            lookup.draft([5, 6, 7, 5], gamma, depth=depth)


def test_gpt_names_a_cache_made_for_another_model_or_dtype():
    """Another width's cache was a RuntimeError from a copy inside attention; a float64 cache under
    a float32 model an SDPA dtype error."""
    model, x = tiny_gpt(), torch.tensor([[1, 2]])
    for cache in (tiny_gpt(n_embd=4).new_cache(), tiny_gpt(dtype=torch.float64).new_cache()):
        with pytest.raises(ValueError, match="made for another model or dtype"):
            model(x, cache)
    assert model(x, model.new_cache()).shape == (1, 2, 5)


def test_new_cache_names_a_size_that_is_not_a_whole_number_of_entries():
    """size=0 was taken as the default (block_size), -1 and 2.5 reached torch.zeros."""
    model = tiny_gpt()
    for size in (0, -1, 2.5):
        with pytest.raises(ValueError, match=r"the cache's size \(entries\) must be an integer"):
            model.new_cache(size=size)
    assert model.new_cache(size=3).size == 3 and model.new_cache().size == 32


def test_is_batch_lives_with_the_batch():
    """The test of a list of prompts moved to minispec.batch.loop; the loops still dispatch."""
    assert is_batch([[1, 2], [3]]) and not is_batch([1, 2]) and not is_batch(torch.tensor([[1]]))
    model = tiny_gpt()
    out = ms.generate(model, [[1, 2], [3]], 2)
    assert [r.tokens for r in out] == [ms.generate(model, p, 2).tokens for p in ([1, 2], [3])]
