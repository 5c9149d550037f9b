"""Batched decoding (minispec.batch and the one loop with a list of prompts): every row exactly what
that prompt alone gives at temperature 0, lossless per row at temperature 1, and two classic batching
bugs (phantom keys, uniform positions) reproduced as negative controls that these checks catch.
"""
import copy

import pytest
import torch

import minispec as ms
from minispec.model import KVCache

LENGTHS = [7, 19, 33, 48, 64, 90, 120, 150]  # a batch of 8 held-out prompts, all of different lengths
N_NEW = 32


@pytest.fixture(scope="module")
def shipped_pair(shipped):
    return shipped, ms.load_model("draft")


@pytest.fixture(scope="module")
def batch_prompts():
    return [p[:n] for p, n in zip(ms.data.prompts(8, length=150), LENGTHS)]


@pytest.fixture(scope="module")
def alone(shipped, batch_prompts):
    """Each prompt decoded on its own (batch 1): what every row of a batch must reproduce."""
    return [ms.generate(shipped, p, N_NEW).tokens for p in batch_prompts]


def rows_equal_alone(target, drafter, prompts, refs, gamma, **kw):
    """Per row: does the batched output equal the prompt decoded alone? (one bool per row)"""
    outs = ms.speculative_generate(target, drafter, prompts, N_NEW, gamma=gamma, **kw)
    assert len(outs) == len(prompts)
    return [o.tokens == r for o, r in zip(outs, refs)]


# --- temperature 0: each row equals that prompt decoded alone -----------------------------------

def test_batched_generate_equals_each_prompt_alone(shipped, batch_prompts, alone):
    outs = ms.generate(shipped, batch_prompts, N_NEW)
    assert [o.tokens for o in outs] == alone
    assert ms.generate(shipped, batch_prompts[:1], N_NEW)[0].tokens == alone[0]  # a batch of one is a list


@pytest.mark.parametrize("gamma", range(1, 9))
def test_batched_speculative_equals_each_prompt_alone(shipped_pair, batch_prompts, alone, gamma):
    target, draft = shipped_pair
    outs = ms.speculative_generate(target, draft, batch_prompts, N_NEW, gamma=gamma)
    assert [o.tokens for o in outs] == alone
    kept = {s.accepted for o in outs for s in o.steps}
    assert 0 in kept and max(kept) > 0  # rows kept different numbers of drafts: the cache was ragged



def test_batched_with_a_shared_policy_and_cropped_prompts(shipped_pair, batch_prompts, alone):
    """An adaptive gamma is shared by the rows (it sees every row's rounds) and still leaves each row exact;
    crop_prompt keeps each row's own end when prompt + max_new_tokens overflows the block."""
    target, draft = shipped_pair
    policy = ms.Heuristic(2)
    outs = ms.speculative_generate(target, draft, batch_prompts, N_NEW, gamma=policy)
    assert [o.tokens for o in outs] == alone
    assert len({len(s.tree.tokens) for o in outs for s in o.steps}) > 2  # the policy changed the draft length
    block = target.config.block_size
    long = [list(range(97, 123)) * 10, batch_prompts[1]]  # 260 tokens: overflows; the other fits
    refs = [ms.generate(target, p[len(p) + N_NEW - block:] if len(p) + N_NEW > block else p, N_NEW).tokens
            for p in long]
    assert [o.tokens for o in ms.speculative_generate(target, draft, long, N_NEW, gamma=3, crop_prompt=True)] == refs
    assert [o.tokens for o in ms.generate(target, long, N_NEW, crop_prompt=True)] == refs

def test_batched_lookup_and_fallback_equal_alone(shipped_pair, batch_prompts, alone):
    target, draft = shipped_pair
    lookup = ms.load_drafter("lookup", target)
    both = ms.FallbackDrafter(ms.PromptLookupDrafter(min_n=3), ms.ModelDrafter(draft), then_gamma=4)
    assert all(rows_equal_alone(target, lookup, batch_prompts, alone, 6))
    assert all(rows_equal_alone(target, both, batch_prompts, alone, 8))


def test_rows_finish_independently_at_eos(shipped_pair, batch_prompts, alone):
    """EOS in some rows only: those rows stop right after it, the others run to max_new_tokens."""
    target, draft = shipped_pair
    seen = [set(a) for a in alone]
    eos = min(set().union(*seen), key=lambda t: abs(sum(t in s for s in seen) - len(seen) / 2))  # in about half the rows
    refs = [ms.generate(target, p, N_NEW, eos_token=eos).tokens for p in batch_prompts]
    assert 0 < sum(len(r) < N_NEW for r in refs) < len(refs)  # some rows end early, some do not
    for gamma in (2, 5):
        outs = ms.speculative_generate(target, draft, batch_prompts, N_NEW, gamma=gamma, eos_token=eos)
        assert [o.tokens for o in outs] == refs
    assert [o.tokens for o in ms.generate(target, batch_prompts, N_NEW, eos_token=eos)] == refs


# --- temperature 1: each row lossless ------------------------------------------------------------

PROMPTS, M = [[1], [2, 0, 1], [0, 2, 2, 1, 0]], 2  # vocabulary 3: rows of different lengths, m new tokens


def joint_law(target_law, target, prompts, m):
    """Rows are independent, each distributed as the target alone: the product of the rows' laws (V^(m B),)."""
    law = torch.ones(1, dtype=torch.float64)
    for p in prompts:
        law = torch.outer(law, target_law(target, p, m).flatten()).flatten()
    return law


def batch_law(exact_law, run, V):
    """The exact law of the whole batch's new tokens, every random draw of `run` enumerated: (V^(m B),)."""
    flat = torch.zeros(V ** (M * len(PROMPTS)), dtype=torch.float64)
    for seq, prob in exact_law(lambda: tuple(t for o in run() for t in o.tokens)).items():
        flat[sum(t * V ** i for i, t in enumerate(reversed(seq)))] += prob
    return flat


@pytest.mark.parametrize("how", ["generate", "chain", "fallback"])
def test_batched_rows_lossless_exactly(tiny_pair, exact_law, target_law, how):
    """The joint law of the whole batch (every random draw enumerated, float64) equals the product of
    the target's per-row laws: each row is lossless and the rows do not leak into one another."""
    target, draft = (copy.deepcopy(m).double() for m in tiny_pair)
    run = {"generate": lambda: ms.generate(target, PROMPTS, M, temperature=1.0),
           "chain": lambda: ms.speculative_generate(target, draft, PROMPTS, M, gamma=2, temperature=1.0),
           "fallback": lambda: ms.speculative_generate(
               target, ms.FallbackDrafter(ms.PromptLookupDrafter(), ms.ModelDrafter(draft)), PROMPTS, M,
               gamma=2, temperature=1.0)}[how]
    law = batch_law(exact_law, run, target.config.vocab_size)
    assert float((law - joint_law(target_law, target, PROMPTS, M)).abs().max()) < 1e-12


def test_batched_rows_lossless_chi_square(tiny_pair, target_law, chi2_pvalue):
    """The same on float32 models by sampling: each row's tokens, 400 seeds, against its target law."""
    target, draft = tiny_pair
    counts = [torch.zeros((3,) * 3) for _ in PROMPTS]
    for seed in range(400):
        for c, o in zip(counts, ms.speculative_generate(target, draft, PROMPTS, 3, gamma=3, temperature=1.0, seed=seed)):
            c[tuple(o.tokens)] += 1
    for c, p in zip(counts, PROMPTS):
        assert chi2_pvalue(c, target_law(target, p, 3)) > 1e-3


# --- negative controls: two classic batching bugs, each caught by the per-row check -------------

def phantom_keys(monkeypatch):
    """Roll a row back by zeroing its entries instead of removing them: they stay in attention."""
    write, mask = KVCache.write, ms.batch.causal_mask

    def zeroing_write(self, layer, k, v):
        K, V = write(self, layer, k, v)
        for b, L in enumerate(self.lengths[:k.shape[0]]):
            K[b, :, L + k.shape[2]:], V[b, :, L + k.shape[2]:] = 0, 0
        return K, V

    def seeing_mask(lengths, n_new, T, masks=None):
        m = mask(lengths, n_new, T, masks)
        for b, (L, n) in enumerate(zip(lengths, n_new)):
            m[b, :n, L + T:] = True  # the zeroed tail, up to the longest row: a zero key scores 0, weight e^0
        return m

    monkeypatch.setattr(KVCache, "write", zeroing_write)
    monkeypatch.setattr(ms.batch, "causal_mask", seeing_mask)


def uniform_positions(monkeypatch):
    """Advance every row's positions as if it were as long as the longest row."""
    feed = ms.batch.feed

    def shifted_feed(model, cache, seqs, pos=None, masks=None):
        L, top = cache.lengths, max(cache.lengths)
        pos = [(pos[b] if pos else torch.arange(L[b], L[b] + len(s))) + top - L[b] for b, s in enumerate(seqs)]
        return feed(model, cache, seqs, pos, masks)

    for module in (ms.speculate, ms.drafters, ms.tree):
        monkeypatch.setattr(module, "feed", shifted_feed)


@pytest.mark.parametrize("bug", [phantom_keys, uniform_positions])
def test_negative_controls_are_caught(shipped_pair, batch_prompts, alone, monkeypatch, bug):
    target, draft = shipped_pair
    prompts, refs = batch_prompts[:4], alone[:4]  # short enough that shifted positions stay in the block
    assert all(rows_equal_alone(target, draft, prompts, refs, 4))
    bug(monkeypatch)
    same = rows_equal_alone(target, draft, prompts, refs, 4)
    assert not all(same) and same[-1]  # some row is wrong; the longest row (never padded, never shifted) is right
    assert [o.tokens for o in ms.generate(target, prompts, N_NEW)] != refs


@pytest.mark.parametrize("bug", [phantom_keys, uniform_positions])
def test_negative_controls_change_the_exact_law(tiny_pair, exact_law, target_law, monkeypatch, bug):
    """At temperature 1 too: under either bug the batch's exact joint law is no longer the product of the
    target's per-row laws (the lossless version of this check: test_batched_rows_lossless_exactly)."""
    target, draft = (copy.deepcopy(m).double() for m in tiny_pair)
    reference = joint_law(target_law, target, PROMPTS, M)
    bug(monkeypatch)
    law = batch_law(exact_law, lambda: ms.speculative_generate(target, draft, PROMPTS, M, gamma=2, temperature=1.0),
                    target.config.vocab_size)
    assert float((law - reference).abs().max()) > 1e-6  # lossless: < 1e-12; the bugs move it by 1e-4 and more


# --- what cannot batch, and bad input --------------------------------------------------------------

@pytest.mark.parametrize("name", ["early_exit", "medusa", "hydra", "eagle"])
def test_drafters_that_cannot_batch_say_so(shipped, name):
    with pytest.raises(ValueError, match="one prompt at a time"):
        ms.speculative_generate(shipped, ms.load_drafter(name, shipped), [[1, 2], [3]], 4)


def test_tree_model_drafter_cannot_batch_and_bad_rows_raise(shipped_pair):
    target, draft = shipped_pair
    with pytest.raises(ValueError, match="one prompt at a time"):
        ms.speculative_generate(target, ms.ModelDrafter(draft, branching=(2, 2)), [[1, 2], [3]], 4)
    with pytest.raises(ValueError, match="prompt is empty"):
        ms.generate(target, [[1, 2], []], 4)
    with pytest.raises(ValueError, match="outside"):
        ms.generate(target, [[1, 2], [256]], 4)
    cache = target.new_cache(2)
    ms.batch.feed(target, cache, [[1, 2, 3], [4]])
    assert cache.lengths == [3, 1]
    with pytest.raises(ValueError, match="different lengths"):
        target(torch.tensor([[5], [6]]), cache)  # a ragged cache needs feed (per-row positions and masks)
    with pytest.raises(ValueError, match="3 rows of tokens for a cache of 2 rows"):
        ms.batch.feed(target, cache, [[1], [2], [3]])
    cache.keep([1, 0], [[1], []])  # row 0 keeps entry 2 as its entry 1; row 1 keeps nothing past entry 0
    assert cache.lengths == [2, 0] and torch.equal(cache.k[:, 0, :, 1], cache.k[:, 0, :, 2])
    cache.length = 3
    cache.keep(1, [1])  # an int start: the same for every row
    assert cache.lengths == [2, 2]


def test_batch_input_forms(shipped):
    """A list of prompts (lists or 1-d tensors) or a (B, T) tensor is a batch; a (1, T) tensor is one prompt."""
    one = ms.generate(shipped, [1, 2, 3], 3).tokens
    assert [r.tokens for r in ms.generate(shipped, torch.tensor([[1, 2, 3], [1, 2, 3]]), 3)] == [one, one]
    assert [r.tokens for r in ms.generate(shipped, [torch.tensor([1, 2, 3]), [1, 2, 3]], 3)] == [one, one]
    assert ms.generate(shipped, torch.tensor([[1, 2, 3]]), 3).tokens == one
    with pytest.raises(ValueError, match="exceeds block_size"):
        ms.generate(shipped, [[1, 2], [1] * 250], 10)  # each prompt is checked on its own
