"""The streaming drafter (minispec/methods/streaming.py): the target drafting with attention sinks
and a recent window of its own cache. Greedy-exact and lossless (the exact law in float64) on a
GPT and on minispec's Llama, whatever the window; a window covering the whole context drafts
exactly what the target would; a smaller one drafts differently (it does attend to less).
SmolLM2 at long contexts: test_smollm2.py and benchmarks/long_context.py."""
import pytest
import torch

import minispec as ms
from minispec.methods.streaming import StreamingDrafter
from minispec.tree import Tree
from test_llama import random_llama

PROMPT = [0, 1, 2, 1]


def models(random_gpt):
    return {"gpt": random_gpt(vocab_size=16, n_layer=2, n_head=2, n_embd=16, block_size=64,
                              seed=2, std=0.3),
            "llama": random_llama(vocab_size=16, n_embd=16, n_head=4, n_kv_head=2, seed=2,
                                  block_size=64)}


@pytest.mark.parametrize("kind", ["gpt", "llama"])
@pytest.mark.parametrize("sinks,window", [(0, 1), (1, 2), (2, 3), (4, 64)])
def test_greedy_equals_generate(random_gpt, kind, sinks, window):
    model = models(random_gpt)[kind]
    prompt = [3, 5, 7, 3, 5, 1, 2, 9, 4, 4, 6]
    ref = ms.generate(model, prompt, 24).tokens
    for gamma in (1, 4):
        res = ms.speculative_generate(model, StreamingDrafter(model, sinks, window), prompt, 24,
                                      gamma=gamma)
        assert res.tokens == ref
        assert res.stats.drafted > 0  # every round after the prefill drafted


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_a_full_window_drafts_what_the_target_says_and_a_small_one_does_not(random_gpt, kind):
    model = models(random_gpt)[kind]
    prompt = [3, 5, 7, 3, 5, 1, 2, 9, 4, 4, 6]
    full = ms.speculative_generate(model, StreamingDrafter(model, 0, 64), prompt, 24, gamma=4)
    assert full.stats.kept_fraction == 1.0  # the view is the whole cache: the same model
    small = [ms.speculative_generate(model, StreamingDrafter(model, s, 1), prompt, 24, gamma=4,
                                     temperature=1.0, seed=seed) for s in (0, 1) for seed in (0, 1)]
    assert min(r.stats.kept_fraction for r in small) < 1.0  # it attends to less: it can differ


def test_the_view_keeps_sinks_then_the_recent_window(random_gpt):
    model = models(random_gpt)["llama"]
    d = StreamingDrafter(model, sinks=2, window=3)
    assert d.kept(4) == [0, 1, 2, 3]
    assert d.kept(10) == [0, 1, 7, 8, 9]
    cache = model.new_cache()
    model(torch.tensor([list(range(10))]), cache)
    d.reset(model, cache)
    small = d.view(10, room=2)
    assert small.length == 5
    assert torch.equal(small.k[:, :, :, :5], cache.k[:, :, :, [0, 1, 7, 8, 9]])
    assert torch.equal(small.v[:, :, :, 2:5], cache.v[:, :, :, 7:10])


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_exact_law_float64(random_gpt, kind, exact_law, dense, target_law):
    """The loop's draws enumerated: its law is the target's to 1e-12 with a window that drops
    most of the context (so the drafts' q differs from p)."""
    model = {"gpt": random_gpt(vocab_size=3, n_layer=2, n_head=2, n_embd=8, block_size=32,
                               seed=0).double(),
             "llama": random_llama().double()}[kind]

    def run():  # a fresh drafter each time (a copy would hold a copy of the model)
        return tuple(ms.speculative_generate(model, StreamingDrafter(model, sinks=1, window=1),
                                             PROMPT, 3, gamma=2, temperature=1.0).tokens)

    law = dense(exact_law(run), 3, 3)
    assert torch.allclose(law, target_law(model, PROMPT, 3), atol=1e-12, rtol=0)


def test_bad_options_and_a_foreign_target_are_value_errors(random_gpt):
    model = models(random_gpt)["gpt"]
    for sinks, window in ((-1, 4), (2, 0), (1.5, 4), (2, None)):
        with pytest.raises(ValueError, match="sinks|window"):
            StreamingDrafter(model, sinks, window)
    other = models(random_gpt)["llama"]
    with pytest.raises(ValueError, match="model it was built on"):
        ms.speculative_generate(other, StreamingDrafter(model), [1, 2], 4)


class WrongQ(StreamingDrafter):
    """A lossy control: drafts drawn from the sparse view, but the full target's q recorded."""

    def draft(self, context, gamma, *args, **kwargs):
        tree = super().draft(context, gamma, *args, **kwargs)
        with torch.no_grad():
            p = self.model(torch.tensor([list(context) + tree.tokens]))[0].softmax(-1)
        return Tree.chain(tree.tokens, [p[len(context) - 1 + i] for i in range(len(tree.tokens))])


def test_a_drafter_that_records_the_wrong_q_is_caught(exact_law, dense, target_law):
    model = random_llama().double()

    def run():
        return tuple(ms.speculative_generate(model, WrongQ(model, sinks=1, window=1), PROMPT, 3,
                                             gamma=2, temperature=1.0).tokens)

    gap = (dense(exact_law(run), 3, 3) - target_law(model, PROMPT, 3)).abs().max()
    assert gap > 1e-3
