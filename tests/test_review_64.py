"""Stop 70's review: the drafters that keep state, inside a FallbackDrafter or wrapping another.
Each test below failed on the code before its fix: PricedDrafter could not wrap a drafter tied to
its target (a ValueError telling the user to pass a target they never passed), counted another
drafter's rounds as tries of its own copy, and named no block size when it could not price; early
exit and layer skipping, after rounds another drafter drafted, ran the whole target again over
every token since their own last round (the tokens stayed exact; the work doubled). A second
review: the batched loop decoded a drafter subclass with its own accept as a plain one (its
accept never ran), exact_law took random.choice and numpy's draws as certain, pearson made a
cell that expects nothing nan, and feed let a cache of another dtype through to SDPA."""
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


# --- the second review: the batched loop, the kit's checks, feed ---------------------------------

def test_a_batch_refuses_a_drafter_subclass_with_its_own_round(target):
    """RoundLogger (kit.training) overrides only accept: given a list of prompts, the batched loop
    used to decode it as a plain ModelDrafter, and its accept never ran (nothing logged)."""
    from minispec.kit.training import RoundLogger
    rows = []
    prompts = [ms.encode("def f("), ms.encode("x = ")]
    ms.speculative_generate(target, RoundLogger(ms.load_model("draft"), 0.0, rows), prompts[0], 8)
    assert rows  # one prompt: logged
    with pytest.raises(ValueError, match="RoundLogger drafts one prompt at a time"):
        ms.speculative_generate(target, RoundLogger(ms.load_model("draft"), 0.0, []), prompts, 8)
    assert len(ms.speculative_generate(target, ms.load_model("draft"), prompts, 8)) == 2  # plain


def test_exact_law_refuses_the_everyday_draws_it_cannot_enumerate():
    """random.choice, numpy's choice, torch.normal...: each gave one outcome at probability 1."""
    import random

    import numpy
    from minispec.kit import checks
    draws = [lambda: random.choice([0, 1]), lambda: random.randint(0, 1),
             lambda: int(numpy.random.choice(2)), lambda: int(numpy.random.default_rng().random()),
             lambda: int(torch.normal(0.0, 1.0, ()) > 0),
             lambda: int(torch.poisson(torch.ones(()))),
             lambda: int(torch.randint_like(torch.zeros(()), 2))]
    for draw in draws:
        with pytest.raises(NotImplementedError, match="exact_law: "):
            checks.exact_law(draw)
    p = torch.tensor([0.25, 0.75])  # torch's own keyword was a TypeError in the stand-in
    assert checks.exact_law(lambda: int(torch.multinomial(p, num_samples=1))) == {0: 0.25, 1: 0.75}


def test_pearson_leaves_out_a_cell_that_expects_nothing():
    """A 0 / 0 cell made the statistic nan (every assert on it failed, either way)."""
    from minispec.kit import checks
    assert checks.pearson([5, 5, 0], [5, 5, 0]) == checks.pearson([5, 5], [5, 5]) == 1.0
    assert checks.pearson([30, 20, 0], [25, 25, 0]) == pytest.approx(checks.pearson([30, 20],
                                                                                     [25, 25]))
    assert checks.pearson([5, 4, 1], [5, 5, 0]) == 0.0  # seen where it cannot happen
    with pytest.raises(ValueError, match="no degree of freedom"):  # accepted_pmf(1.0, 2): one
        checks.pearson([0, 0, 50], [0, 0, 50])  # outcome can happen, so there is nothing to test
    with pytest.raises(ValueError, match="differ in shape"):
        checks.pearson([5, 5, 0], [5, 5])


def test_feed_names_a_cache_of_another_model_or_dtype(target):
    from minispec.batch import RaggedCache, feed
    double = copy.deepcopy(target).double()
    with pytest.raises(ValueError, match="another model or dtype"):
        feed(double, RaggedCache(target.config, 2), [[1, 2, 3], [4]])  # float32 storage
    other = ms.GPT(ms.GPTConfig(vocab_size=256, n_layer=1, n_head=2, n_embd=8, block_size=16))
    with pytest.raises(ValueError, match="another model or dtype"):
        feed(target, RaggedCache(other.config, 2), [[1, 2, 3], [4]])
    h, logits = feed(double, RaggedCache(double.config, 2, dtype=torch.float64), [[1, 2, 3], [4]])
    assert logits.dtype == torch.float64 and logits.shape[:2] == (2, 3)


# --- the third review: the core's Tree ----------------------------------------------------------

def test_a_hand_built_tree_with_a_repeated_sibling_keeps_its_shape():
    """Tree(tokens=[1, 1, 2, 0], parents=[-1, -1, 0, 1]): the second 1 merges into the first, and
    the nodes after it hung under the wrong parents (the numbers given were read after the merge
    had shifted them: [-1, 0, 1], depths 1, 2, 3); tokens given as a tensor were a RuntimeError."""
    t = ms.Tree(tokens=[1, 1, 2, 0], parents=[-1, -1, 0, 1])
    assert (t.tokens, t.parents, t.depths().tolist()) == ([1, 2, 0], [-1, 0, 0], [1, 2, 2])
    paths = ms.Tree.from_paths([[1, 2], [1, 0]])  # the same tree, from the paths it holds
    assert (paths.tokens, paths.parents) == (t.tokens, t.parents)
    t = ms.Tree(tokens=torch.tensor([1, 2]), parents=[-1, 0])
    assert (t.tokens, t.parents) == ([1, 2], [-1, 0])
