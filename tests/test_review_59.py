"""Stop 59: student reviews of notebooks 00, 02, 06, 08, 10 and 11, and a bug hunt.

The exact enumeration behind every "exact" claim (`checks.exact_law`) treated each comparison of a
coin `torch.rand(()) < a` as a fresh draw. A rule that draws one u and compares it at every
position (correlated acceptances: both drafts kept with probability min(a_1, a_2), not a_1 a_2)
was enumerated as the right rule, and notebook 02's exercise check passed it. A coin is now a
uniform draw known to lie in an interval that each comparison narrows; Python's and NumPy's
random draws are refused inside exact_law, as torch's other draws were."""
import random

import numpy
import pytest
import torch

import minispec as ms
from minispec.kit import checks


def test_one_coin_compared_twice_is_one_uniform_draw():
    def two_looks():
        u = torch.rand(())
        return bool(u < 0.5), bool(u < 0.25)
    law = checks.exact_law(two_looks)
    assert law == pytest.approx({(True, True): 0.25, (True, False): 0.25, (False, False): 0.5})
    assert (False, True) not in law  # u < 0.25 without u < 0.5: impossible for one u


def test_a_coin_compared_the_other_way_and_again_stays_consistent():
    def looks():
        u = torch.rand(())
        return bool(u >= 0.6), bool(u < 0.8), bool(u <= 0.6)
    law = checks.exact_law(looks)
    assert law == pytest.approx({(True, True, False): 0.2, (True, False, False): 0.2,
                                 (False, True, True): 0.6})


def test_fresh_coins_are_independent_as_before():
    law = checks.exact_law(lambda: (bool(torch.rand(()) < 0.5), bool(torch.rand(()) < 0.25)))
    assert law == pytest.approx({(True, True): 0.125, (True, False): 0.375,
                                 (False, True): 0.125, (False, False): 0.375})


def one_coin_accept(draft_tokens, q, p):
    """The lossy rule: one u for every position."""
    u = torch.rand(())
    for i, x in enumerate(draft_tokens):
        if not u < min(1.0, float(p[i, x] / q[i, x])):
            r = torch.clamp(p[i] - q[i], min=0)
            return i, ms.sample(r / r.sum())
    return len(draft_tokens), ms.sample(p[-1])


def test_the_reused_coin_rule_is_caught_against_the_package_rule():
    f64 = torch.float64
    p = torch.tensor([[.4, .3, .2, .1], [.1, .2, .3, .4], [.7, .1, .1, .1]], dtype=f64)
    q = torch.tensor([[.2, .8, 0, 0], [0, .1, .5, .4]], dtype=f64)
    right = checks.exact_law(lambda: ms.speculative_accept([1, 2], q, p))
    wrong = checks.exact_law(lambda: one_coin_accept([1, 2], q, p))
    keep_both = (min(1, .3 / .8) * min(1, .3 / .5), min(1, .3 / .8))  # a_1 a_2 and min(a_1, a_2)
    assert sum(w for (n, _), w in right.items() if n == 2) == pytest.approx(keep_both[0])
    assert sum(w for (n, _), w in wrong.items() if n == 2) == pytest.approx(keep_both[1])


@pytest.mark.parametrize("draw", [random.random, numpy.random.rand, numpy.random.random],
                         ids=["random.random", "numpy.random.rand", "numpy.random.random"])
def test_python_and_numpy_draws_are_refused(draw):
    owner = random if draw is random.random else numpy.random
    name = draw.__name__

    def coin():
        return getattr(owner, name)() < 0.5  # looked up at call time, as a student's code does
    with pytest.raises(NotImplementedError, match=name):
        checks.exact_law(coin)
    assert getattr(owner, name) is draw  # restored after the check


# --- a bug hunt: drafters called directly, as a reader calls `draft` -----------------------------

A = ms.encode("import os\n")
B = ms.encode("print(value)\n    for item in items:\n        if item.name == ")


@pytest.fixture(scope="module")
def target():
    return ms.load_model("target")


@pytest.mark.parametrize("name, options", [("early_exit", {}), ("layer_skip", {"skip": [2, 3]})])
def test_shared_cache_drafters_draft_any_context_as_a_fresh_one(target, name, options):
    """Early exit and layer skipping keep the target's cache between calls. Called on one context,
    then on another, they drafted from the first's keys (early exit drafted "'strin" where a fresh
    drafter drafts "0:\\n   "), and a call repeated on the same context raised a torch
    RuntimeError. The cache now backs up to where the contexts part."""
    fresh = ms.load_drafter(name, target, **options).draft(B, 6).tokens
    d = ms.load_drafter(name, target, **options)
    d.draft(A, 4)
    assert d.draft(B, 6).tokens == fresh
    assert d.draft(B, 4).tokens == fresh[:4]  # the same context again: no RuntimeError
    shorter = ms.load_drafter(name, target, **options).draft(B[:-3], 2).tokens
    assert d.draft(B[:-3], 2).tokens == shorter
    with pytest.raises(ValueError, match="at least one token"):
        d.draft([], 3)


def test_shared_cache_drafters_still_equal_generate_in_the_loop(target):
    for d in (ms.load_drafter("early_exit", target), ms.load_drafter("layer_skip", target)):
        want = ms.generate(target, B, 24).tokens
        assert ms.speculative_generate(target, d, B, 24, gamma=4).tokens == want
        assert ms.speculative_generate(target, d, A, 24, gamma=4).tokens == ms.generate(
            target, A, 24).tokens


@pytest.mark.parametrize("name", ["eagle", "medusa", "hydra"])
def test_feature_drafters_draft_nothing_for_a_context_they_have_not_read(target, name):
    """EAGLE's and the heads' drafts read the target's features of the context. After a decode of
    A, `draft(B)` drafted from A's features (EAGLE: 'string' where the target writes '_init_');
    before any reset EAGLE raised an AttributeError. Both now draft nothing, as in a first round."""
    d = ms.load_drafter(name, target)
    assert d.draft(B, 4).tokens == []  # never reset: no features
    out = ms.speculative_generate(target, d, A, 16, gamma=4)
    assert out.tokens == ms.generate(target, A, 16).tokens
    assert d.draft(B, 4).tokens == []  # A's features are not B's
    assert len(d.draft(A + out.tokens, 4).tokens) > 0  # the context they were read on


def test_eagle_on_a_llama_drafts_nothing_for_another_context():
    from test_eagle_llama import random_head
    from test_llama import random_llama

    from minispec.methods.eagle_llama import EagleLlamaDrafter
    model = random_llama(vocab_size=16, n_embd=16, n_head=4, n_kv_head=2, seed=2, block_size=64)
    d = EagleLlamaDrafter(random_head(model, list(range(16))))
    prompt = [3, 5, 7, 3, 5, 1, 2, 9, 4, 4, 6]
    out = ms.speculative_generate(model, d, prompt, 12, gamma=3)
    assert out.tokens == ms.generate(model, prompt, 12).tokens
    assert d.draft([1, 2], 3).tokens == []  # a shorter context raised a RuntimeError
    assert d.draft(prompt + out.tokens, 3).tokens  # the context it read still drafts


@pytest.mark.parametrize("name", ["beam", "early_exit", "layer_skip", "lookahead", "eagle",
                                  "medusa", "lookup_fallback"])
def test_draft_takes_what_the_loop_takes_and_names_the_rest(target, name):
    """A tensor or a tuple context and a whole gamma such as 3.0 draft as a list and 3 do; 2.5,
    None and a batch are ValueErrors naming the argument (TypeErrors from inside before)."""
    def make():
        if name == "lookup_fallback":
            return ms.methods.FallbackDrafter(ms.PromptLookupDrafter(), ms.load_model("draft"))
        if name == "layer_skip":
            return ms.load_drafter(name, target, skip=[2, 3])
        if name == "lookahead":
            return ms.Lookahead(target)
        return ms.load_drafter(name, target)
    want = make().draft(B, 3).tokens
    assert make().draft(torch.tensor(B), 3.0).tokens == want
    assert make().draft(tuple(B), numpy.int64(3)).tokens == want
    for gamma in (2.5, None, "3"):
        with pytest.raises(ValueError, match="gamma"):
            make().draft(B, gamma)
    with pytest.raises(ValueError, match="one sequence"):
        make().draft(torch.tensor([B]), 3)
    with pytest.raises(ValueError, match="depth"):
        make().draft(B, 3, depth=1.5)


def test_loading_a_drafters_file_onto_a_name_is_named(target):
    """load_heads("target", ...) and load_eagle(None) raised AttributeErrors, load_eagle(t, 5) a
    TypeError: the model and the path are named now."""
    from minispec.methods import load_eagle, load_heads
    for call in (lambda: load_heads("target", "medusa"), lambda: load_eagle(None),
                 lambda: load_eagle("target"), lambda: load_eagle(target, 5)):
        with pytest.raises(ValueError, match="GPT"):
            call()


def test_search_skip_names_its_gamma(target):
    from minispec.methods.layer_skip import search_skip
    for gamma in (None, -3, 2.5):
        with pytest.raises(ValueError, match="gamma"):
            search_skip(target, B, gamma=gamma)


def test_typical_and_topk_accept_refuse_logits():
    """The lossy rules read p[x] against a threshold: given logits they returned a token without a
    word (the lossless rules refuse logits since stop 58)."""
    from minispec.methods import topk_accept, typical_accept
    logits = torch.tensor([2.0, 1.0, -1.0])
    for rule in (typical_accept, topk_accept):
        with pytest.raises(ValueError, match="distributions"):
            rule([1], None, logits)
        assert rule([0], None, ms.probs(logits)) in range(3)


def test_chi2_of_infinite_counts_is_named_not_nan():
    with pytest.raises(ValueError, match="finite"):
        checks.chi2_pvalue([10, float("inf")], [0.5, 0.5])


def test_to_hf_converts_a_gpt_in_its_own_dtype(optional):
    optional("transformers")
    from minispec.bridge import hf
    with pytest.raises(ValueError, match="GPT"):
        hf.to_hf(None)
    draft = ms.load_model("draft").double()
    assert hf.to_hf(draft).dtype == torch.float64  # it came back float32: not the same weights


def test_kit_training_and_batch_name_their_bad_arguments(target):
    """Each raised from inside (a TypeError, an IndexError, torch's dtype error) or returned an
    empty result without a word; the batch's all-empty rows now feed as a (B, 0) batch."""
    from minispec.batch import RaggedCache, causal_mask, feed
    from minispec.kit import training
    from minispec.methods import medusa_tree
    data = torch.tensor(ms.encode("def f(x):\n    return x + 1\n" * 20))
    bad = {"block_size": lambda: training.get_batch(data, 2, 0, torch.Generator()),
           "idx must be": lambda: training.exit_logits(target, torch.tensor(B)),
           "at least one exit": lambda: training.early_exit_loss([], torch.zeros(1, 2).long()),
           "one row of rank": lambda: medusa_tree([0.5, 0.2]),
           "one count of new tokens": lambda: causal_mask([], [], 3)}
    for message, call in bad.items():
        with pytest.raises(ValueError, match=message):
            call()
    cache = RaggedCache(target.config, 2)
    assert feed(target, cache, [[], []])[1].shape == (2, 0, 256) and cache.lengths == [0, 0]
    rows = training.reliability([0.1, 0.9], [0.0, 1.0])  # lists, as a reader passes them
    assert [(lo, n, y) for lo, _, n, _, y in rows] == [(0.0, 1, 0.0), (0.8, 1, 1.0)]


# --- kit.timing called with what a reader passes (its cost profile moved to kit.costs) -----------

def test_timing_names_one_number_where_per_prompt_ratios_go():
    from minispec.kit import timing
    for call in (lambda: timing.spread(1.2), lambda: timing.agreement(1.2, 0.05),
                 lambda: timing.spread(torch.tensor(1.2))):
        with pytest.raises(ValueError, match="one speedup per prompt"):
            call()
    assert timing.spread(torch.tensor([1.0, 1.5, 2.0])) == "1.50x (1.00-2.00)"
    assert timing.agreement(numpy.array([1.2, 1.3]), 0.05) == ("faster", "faster on 2 of 2 prompts")


def test_compare_names_a_bad_band_before_timing_and_prints_a_tensor_band():
    from minispec.kit import timing
    timed = []

    def work(item):
        timed.append(item)
        return item
    with pytest.raises(ValueError, match="band"):
        timing.compare(work, work, [1, 2], band=-1)
    assert timed == []  # named before any timing (after all of it before)
    assert "+-5%" in str(timing.compare(work, work, [1], repeats=1, band=torch.tensor(0.05)))


def test_race_names_a_single_item_not_in_a_list(target):
    from minispec.kit import timing
    with pytest.raises(ValueError, match="seed, ids"):
        timing.race(target, ms.load_model("draft"), (0, B[:8]), 4, 2)


def test_the_cost_profile_names_its_calls_and_takes_a_0d_k(target):
    from minispec.kit import costs, timing
    assert timing.step_costs is costs.step_costs  # moved, still timing's
    with pytest.raises(ValueError, match="dict"):
        timing.call_costs([(target, 1, 8)], reps=1)
    with pytest.raises(ValueError, match="model must be"):
        timing.call_costs({"a": (None, 1, 8)}, reps=1)
    assert list(timing.step_costs(target, torch.tensor(2), context=8, reps=1)) == [2]


def test_pearson_takes_lists_and_names_a_negative_fitted():
    """pearson([10., 12.], [11., 11.]) raised a TypeError (lists); fitted=-1 added a degree of
    freedom without a word."""
    assert checks.pearson([10.0, 12.0], [11.0, 11.0]) == pytest.approx(
        checks.pearson(torch.tensor([10.0, 12.0]), torch.tensor([11.0, 11.0])))
    with pytest.raises(ValueError, match="fitted"):
        checks.pearson([10.0, 12.0], [11.0, 11.0], fitted=-1)
