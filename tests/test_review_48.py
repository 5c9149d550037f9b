"""Review fixes of stop 48: each test failed before its fix (or guards what must keep working)."""
import pytest
import torch

import minispec as ms


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_tiny_positive_temperature_is_the_argmax_not_nan(dtype):
    """logits / 1e-40 overflowed float32 to inf, and softmax made nan (generate crashed in
    multinomial); the largest logit is now subtracted first."""
    logits = torch.tensor([[0.0, 1.0, 2.0], [5.0, -1.0, 4.0]], dtype=dtype)
    tiny = 1e-300 if dtype == torch.float64 else 1e-40
    assert torch.equal(ms.probs(logits, tiny), ms.probs(logits, 0.0))
    for T in (0.7, 1.0, 3.0):  # the usual temperatures: softmax(logits / T), as before
        assert torch.allclose(ms.probs(logits, T), torch.softmax(logits / T, -1), atol=1e-7)


def test_a_tiny_temperature_decodes_greedily(byte_pair):
    target, draft = byte_pair
    ids = ms.encode("def f")
    greedy = ms.generate(target, ids, 6).tokens
    assert ms.generate(target, ids, 6, temperature=1e-38).tokens == greedy
    assert ms.speculative_generate(target, draft, ids, 6, temperature=1e-38).tokens == greedy


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_tree_larger_than_the_cache_room_is_cut_to_block_size(temperature):
    """gamma=400 tree nodes after a 200-token prompt needed 600 of the cache's 512 entries (a
    ValueError naming new_cache(size=...), which speculative_generate does not take); a round
    now drafts at most block_size nodes, and greedy text is still generate's."""
    target = ms.load_model("target")
    ids = ms.data.prompts(1, length=200)[0]
    drafter = ms.load_drafter("draft", target, branching=(32, 32))
    res = ms.speculative_generate(target, drafter, ids, 8, gamma=400, temperature=temperature)
    block = target.config.block_size
    assert max(len(s.tree.tokens) for s in res.steps) <= block
    if temperature == 0:  # greedy: the tree fills its budget
        assert max(len(s.tree.tokens) for s in res.steps) == block
        assert res.tokens == ms.generate(target, ids, 8).tokens


def test_a_prompt_tensor_of_three_dimensions_is_refused(byte_pair):
    """A (1, 2, 2) tensor was flattened into the one prompt [1, 2, 3, 4]."""
    target, _ = byte_pair
    with pytest.raises(ValueError, match="token id must be an integer"):
        ms.generate(target, torch.tensor([[[1, 2], [3, 4]]]), 5)
    assert ms.generate(target, torch.tensor([[1, 2, 3]]), 3).tokens == \
        ms.generate(target, [1, 2, 3], 3).tokens
