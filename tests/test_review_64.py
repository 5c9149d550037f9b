"""Stop 70's review: the drafters that keep state, inside a FallbackDrafter or wrapping another.
Each test below failed on the code before its fix: PricedDrafter could not wrap a drafter tied to
its target (a ValueError telling the user to pass a target they never passed), counted another
drafter's rounds as tries of its own copy, and named no block size when it could not price; early
exit and layer skipping, after rounds another drafter drafted, ran the whole target again over
every token since their own last round (the tokens stayed exact; the work doubled)."""
import copy

import pytest
import torch

import minispec as ms
from minispec.methods import EarlyExitDrafter, FallbackDrafter, LayerSkipDrafter, PricedDrafter

FLAT = [1.0, 1.0, 1.0, 1.0, 1.0]  # a guess costs nothing: priced drafts gamma after any match


@pytest.fixture(scope="module")
def target():
    return ms.load_model("target")


@pytest.mark.parametrize("inner", ["early_exit", "layer_skip"])
def test_priced_wraps_a_drafter_tied_to_its_target(target, inner):
    make = {"early_exit": lambda: EarlyExitDrafter(target, k=2),
            "layer_skip": lambda: LayerSkipDrafter(target, skip=[2, 3])}[inner]
    ids = ms.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
    ref = ms.generate(target, ids, 32).tokens
    for drafter in (PricedDrafter(make(), costs=FLAT),
                    ms.load_drafter("priced", target, drafter=make(), costs=FLAT)):
        res = ms.speculative_generate(target, drafter, ids, 32, gamma=4)
        assert res.tokens == ref and sum(s.accepted for s in res.steps) > 0


@pytest.mark.parametrize("inner", ["early_exit", "layer_skip"])
def test_a_shared_cache_drafter_after_lookups_rounds_feeds_only_new_tokens(target, inner):
    """Each of its target calls runs the deep blocks over the tokens that call needs: the root (the
    last context token) and the drafts, not every token lookup's rounds added since."""
    drafter = EarlyExitDrafter(target, k=2) if inner == "early_exit" else LayerSkipDrafter(
        target, skip=[2, 3])
    fed = []
    score = drafter.score

    def spy(target_, cache, context, tree):
        before = drafter.deep
        out = score(target_, cache, context, tree)
        fed.append((len(context) + len(tree.tokens) - before, 1 + len(tree.tokens)))
        return out
    drafter.score = spy
    ids = ms.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
                    "def mul(a, b):\n")
    res = ms.speculative_generate(target, FallbackDrafter(ms.PromptLookupDrafter(min_n=2), drafter),
                                  ids, 96, gamma=4)
    assert res.tokens == ms.generate(target, ids, 96).tokens
    assert len(fed) > 3 and len(res.steps) > len(fed)  # its rounds, and lookup's (scored alike)
    assert fed[1:] == [(need, need) for _, need in fed[1:]]  # the first: the prompt's prefill


def test_priced_counts_only_its_own_rounds_inside_a_fallback(target):
    """Priced first, a model draft after it: the tries priced records are its own tokens (at most
    one per drafted token), not the model draft's."""
    priced = PricedDrafter(costs=FLAT)
    own = []
    draft = priced.draft

    def spy(*args, **kwargs):
        tree = draft(*args, **kwargs)
        own.append(len(tree.tokens))
        return tree
    priced.draft = spy
    then = ms.ModelDrafter(copy.deepcopy(target))  # the target itself: its drafts all kept
    ids = ms.encode("x = 1\ny = 2\nz = x + y\nprint(")
    res = ms.speculative_generate(target, FallbackDrafter(priced, then), ids, 48, gamma=4)
    assert res.tokens == ms.generate(target, ids, 48).tokens
    assert sum(own) > 0 and own.count(0) > 0  # both drafted
    assert 0 < sum(priced.tried) <= sum(own)


def test_price_names_a_block_too_short_for_its_calls():
    torch.manual_seed(0)
    short = ms.GPT(ms.GPTConfig(vocab_size=8, n_layer=1, n_head=1, n_embd=8, block_size=8)).eval()
    with pytest.raises(ValueError, match="block_size=8 is too short for max_gamma=8"):
        PricedDrafter().price(short)
    assert len(PricedDrafter().price(short, max_gamma=6).v) == 7  # 1..7 after one token: fits
