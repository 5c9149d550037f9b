"""Stop 58: the verification rules check that p and q are distributions.

speculative_accept and multi_draft_accept read p and q through min(1, p / q) and the residual
norm(max(0, p - q)). Given logits they returned tokens without a word, from a law that is neither
p nor q (accept_prob of two logits is often 1, so a draft from q was kept every time); given nan
they returned a token too. The loop always passes ms.probs' rows, so only a direct call could go
wrong, and that is how the notebooks teach the rules."""
import pytest
import torch

import minispec as ms

LOGITS_P = torch.tensor([[2.0, 1.0, -1.0], [0.5, 3.0, 0.0]])  # (gamma + 1, V) for gamma = 1
LOGITS_Q = torch.tensor([[1.0, 2.0, 0.0]])


def test_logits_would_have_given_another_acceptance():
    """Why the check: min(1, p / q) of logits is not the acceptance of the distributions they
    stand for. For the draft 1 below the logits give min(1, 1 / 2) = 0.5, the distributions 0.39;
    and nothing in a (V,) tensor tells the rule which of the two it holds, so it must refuse what
    is not a distribution."""
    p, q = ms.probs(LOGITS_P), ms.probs(LOGITS_Q)
    assert float(ms.accept_prob(LOGITS_P[0, 1], LOGITS_Q[0, 1])) == 0.5
    assert round(float(ms.accept_prob(p[0, 1], q[0, 1])), 2) == 0.39


@pytest.mark.parametrize("which", ["p", "q"])
def test_speculative_accept_refuses_logits(which):
    p, q = ms.probs(LOGITS_P), ms.probs(LOGITS_Q)
    args = {"p": (LOGITS_P if which == "p" else p), "q": (LOGITS_Q if which == "q" else q)}
    with pytest.raises(ValueError, match=f"{which} must be distributions"):
        ms.speculative_accept([1], args["q"], args["p"])


@pytest.mark.parametrize("bad", ["logits", "nan", "unnormalized", "negative"])
def test_multi_draft_accept_refuses_what_is_not_a_distribution(bad):
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.3, 0.5])
    wrong = {"logits": torch.tensor([2.0, 1.0, -1.0]),
             "nan": torch.tensor([0.5, float("nan"), 0.5]),
             "unnormalized": torch.tensor([0.5, 0.3, 0.4]),
             "negative": torch.tensor([0.7, 0.5, -0.2])}[bad]
    with pytest.raises(ValueError, match="p must be distributions"):
        ms.multi_draft_accept([0], q, wrong)
    with pytest.raises(ValueError, match="q must be distributions"):
        ms.multi_draft_accept([0], wrong, p)
    with pytest.raises(ValueError, match="p must be distributions"):
        ms.multi_draft_accept([0], None, wrong)  # guesses: p is still sampled from


def test_multi_draft_accept_names_a_missing_p():
    with pytest.raises(ValueError, match="p must be distributions"):
        ms.multi_draft_accept([0], None, None)  # a TypeError from inside before
    with pytest.raises(ValueError, match="p must be distributions"):
        ms.multi_draft_accept([0], None, [0.5, 0.5])


def test_distributions_in_float_rounding_still_pass():
    """Rows of ms.probs over a large vocabulary sum to 1 only up to rounding; they pass, in float32
    and float16 (a float16 p sums to 1 within about 1e-3)."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50_000, generator=gen) * 3
    for dtype in (torch.float32, torch.float16):
        p = ms.probs(logits).to(dtype)
        q = ms.probs(logits.flip(-1)).to(dtype)[:3]
        n, tok = ms.speculative_accept([0, 1, 2], q.float(), p.float(), generator=gen)
        assert 0 <= n <= 3 and 0 <= tok < 50_000
        assert 0 <= ms.multi_draft_accept([5], q[0], p[0], generator=gen) < 50_000


def test_greedy_accept_reads_only_the_argmax():
    """greedy_accept needs no law: its argmax of logits is the argmax of their softmax."""
    assert ms.greedy_accept([0], LOGITS_P) == ms.greedy_accept([0], ms.probs(LOGITS_P)) == (1, 1)


# --- outside the core: four crashes from inside, each named now --------------------------------

def test_causal_mask_wants_one_count_per_row():
    """zip dropped the rows its shorter list lacked: a (2, T, S) mask came back for 2 lengths and
    1 count, its second row all False but its padding diagonal; a count above T was a shape
    error from inside."""
    from minispec.batch import causal_mask
    assert causal_mask([2, 3], [1, 2], 2).shape == (2, 2, 5)
    with pytest.raises(ValueError, match="one count of new tokens per row"):
        causal_mask([2, 3], [1], 2)
    with pytest.raises(ValueError, match="each at most T=2"):
        causal_mask([2, 3], [1, 3], 2)


def test_feed_takes_tuples_and_tensors_as_lists(random_gpt):
    """feed padded each row with `s + [0] * k`: a tuple or a tensor row was a TypeError."""
    from minispec.batch import RaggedCache, feed
    model = random_gpt(vocab_size=16, block_size=32, seed=1)
    rows = {"lists": [[1, 2, 3], [4]], "tuples": [(1, 2, 3), (4,)],
            "tensors": [torch.tensor([1, 2, 3]), torch.tensor([4])]}
    out = {k: feed(model, RaggedCache(model.config, 2), v)[1] for k, v in rows.items()}
    assert torch.equal(out["lists"], out["tuples"]) and torch.equal(out["lists"], out["tensors"])
    with pytest.raises(ValueError, match="each token id"):
        feed(model, RaggedCache(model.config, 2), [[1, 2.5], [4]])


def test_draft_rollouts_at_temperature_zero_is_the_argmax(random_gpt):
    """logits / 0 was nan (or inf), and torch.multinomial raised on it."""
    from minispec.kit.training import draft_rollouts
    model = random_gpt(vocab_size=16, block_size=32, seed=2)
    prefixes = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = draft_rollouts(model, prefixes, 4, torch.Generator().manual_seed(0), temperature=0.0)
    want = ms.generate(model, [[1, 2, 3], [4, 5, 6]], 4)
    assert out[:, 3:].tolist() == [r.tokens for r in want]
    with pytest.raises(ValueError, match="temperature"):
        draft_rollouts(model, prefixes, 4, torch.Generator(), temperature=-1.0)


def test_chi2_pvalue_takes_a_counter():
    """A Counter of outcomes (what exact tallies produce) was a TypeError inside torch; it is
    the same test as its dense counts, and an outcome outside the cells is named."""
    from collections import Counter

    from minispec.kit.checks import chi2_pvalue
    p = [0.5, 0.3, 0.2]
    tally = Counter({0: 48, 2: 21, 1: 31})
    assert chi2_pvalue(tally, p) == chi2_pvalue([48, 31, 21], p)
    assert chi2_pvalue(Counter({torch.tensor(0): 50, 1: 50}), [0.5, 0.5]) == 1.0
    with pytest.raises(ValueError, match="each outcome counted"):
        chi2_pvalue(Counter({0: 50, 3: 50}), p)
    assert chi2_pvalue(Counter({0: 100}), p) < 1e-6  # a lossy tally is still caught


def test_lookahead_names_an_empty_context(random_gpt):
    """context[-1] of [] was an IndexError, reachable by calling draft directly."""
    look = ms.Lookahead(random_gpt(vocab_size=16, block_size=32, seed=2))
    with pytest.raises(ValueError, match="at least one token"):
        look.draft([], 4)
    assert look.draft([5, 6], 4).tokens == [6, 6, 6, 6]  # no guesses yet: the root repeated


# --- the copying drafters called directly (a bug hunt): their arguments checked once -----------

COPIERS = ["EditLookupDrafter", "CopyCursorDrafter", "MatchLengthDrafter", "LookupTreeDrafter"]


@pytest.mark.parametrize("name", COPIERS)
def test_copying_drafters_take_what_the_loop_takes_and_name_the_rest(name):
    """draft(ctx, 2.0), a tensor context or a numpy gamma gave TypeErrors from inside (or, for a
    (1, T) tensor, an empty draft without a word); reset() wanted a target and a cache."""
    import numpy as np

    import minispec.methods as methods
    drafter = getattr(methods, name)()
    drafter.reset()  # outside the loop: nothing to share
    ctx = [1, 2, 3, 4, 1, 2]
    want = drafter.draft(ctx, 3).tokens
    assert want and drafter.draft(torch.tensor(ctx), 3.0).tokens == want
    assert drafter.draft(ctx, np.int64(3), depth=2.0).tokens == want[:2]
    bad = [("gamma", ctx, 2.5, None), ("gamma", ctx, None, None), ("depth", ctx, 3, 2.5),
           ("context", torch.tensor([ctx]), 3, None), ("context", "abc", 3, None)]
    for what, c, gamma, depth in bad:
        with pytest.raises(ValueError, match=what):
            drafter.draft(c, gamma, depth=depth)


def test_copying_drafters_are_unchanged_in_the_loop(random_gpt):
    """The checks change nothing the loop sees: temperature 0 is still generate's text."""
    import minispec.methods as methods
    target = random_gpt(vocab_size=16, block_size=64, seed=5)
    ids = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2]
    want = ms.generate(target, ids, 20).tokens
    for name in COPIERS:
        got = ms.speculative_generate(target, getattr(methods, name)(), ids, 20, gamma=3)
        assert got.tokens == want, name
