"""Batched decoding (minispec.batch: ms.generate / ms.speculative_generate with a list of prompts):
every row exactly what that prompt alone gives at temperature 0, lossless per row at temperature 1,
and two classic batching bugs (phantom keys, uniform positions) injected into
minispec.batch.ragged / minispec.batch.loop as negative controls that these checks catch. The
batched loop batches chains only (a model drafter without branching, prompt lookup, and their
FallbackDrafter).
"""
import copy

import pytest
import torch

import minispec as ms
from minispec.batch import loop, ragged
from minispec.batch.ragged import RaggedCache

LENGTHS = [7, 19, 33, 48, 64, 90, 120, 150]  # 8 held-out prompts, all of different lengths
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
    # a batch of one is a list
    assert ms.generate(shipped, batch_prompts[:1], N_NEW)[0].tokens == alone[0]


@pytest.mark.parametrize("gamma", range(1, 9))
def test_batched_speculative_equals_each_prompt_alone(shipped_pair, batch_prompts, alone, gamma):
    target, draft = shipped_pair
    outs = ms.speculative_generate(target, draft, batch_prompts, N_NEW, gamma=gamma)
    assert [o.tokens for o in outs] == alone
    kept = {s.accepted for o in outs for s in o.steps}
    assert 0 in kept and max(kept) > 0  # rows kept different numbers of drafts: a ragged cache


def test_batched_with_a_shared_policy_and_cropped_prompts(shipped_pair, batch_prompts, alone):
    """An adaptive gamma is shared by the rows (it sees every row's rounds) and still leaves each
    row exact; crop_prompt keeps each row's own end when prompt + max_new_tokens overflows the
    block."""
    target, draft = shipped_pair
    policy = ms.Heuristic(2)
    outs = ms.speculative_generate(target, draft, batch_prompts, N_NEW, gamma=policy)
    assert [o.tokens for o in outs] == alone
    assert len({len(s.tree.tokens) for o in outs for s in o.steps}) > 2  # the policy changed gamma
    block = target.config.block_size
    long = [list(range(97, 123)) * 10, batch_prompts[1]]  # 260 tokens: overflows; the other fits
    refs = [ms.generate(target, p[len(p) + N_NEW - block:] if len(p) + N_NEW > block else p,
                        N_NEW).tokens for p in long]
    outs = ms.speculative_generate(target, draft, long, N_NEW, gamma=3, crop_prompt=True)
    assert [o.tokens for o in outs] == refs
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
    eos = min(set().union(*seen),  # a token in about half the rows
              key=lambda t: abs(sum(t in s for s in seen) - len(seen) / 2))
    refs = [ms.generate(target, p, N_NEW, eos_token=eos).tokens for p in batch_prompts]
    assert 0 < sum(len(r) < N_NEW for r in refs) < len(refs)  # some rows end early, some do not
    for gamma in (2, 5):
        outs = ms.speculative_generate(target, draft, batch_prompts, N_NEW, gamma=gamma,
                                       eos_token=eos)
        assert [o.tokens for o in outs] == refs
    assert [o.tokens for o in ms.generate(target, batch_prompts, N_NEW, eos_token=eos)] == refs


# --- temperature 1: each row lossless ------------------------------------------------------------

PROMPTS, M = [[1], [2, 0, 1], [0, 2, 2, 1, 0]], 2  # vocabulary 3: ragged rows, M new tokens


def joint_law(target_law, target, prompts, m):
    """Rows are independent, each distributed as the target alone: the product of the rows' laws
    (V^(m B),)."""
    law = torch.ones(1, dtype=torch.float64)
    for p in prompts:
        law = torch.outer(law, target_law(target, p, m).flatten()).flatten()
    return law


def batch_law(exact_law, run, V):
    """The exact law of the whole batch's new tokens, every random draw of `run` enumerated:
    (V^(m B),)."""
    flat = torch.zeros(V ** (M * len(PROMPTS)), dtype=torch.float64)
    for seq, prob in exact_law(lambda: tuple(t for o in run() for t in o.tokens)).items():
        flat[sum(t * V ** i for i, t in enumerate(reversed(seq)))] += prob
    return flat


@pytest.mark.parametrize("how", ["generate", "chain", "fallback"])
def test_batched_rows_lossless_exactly(tiny_pair, exact_law, target_law, how):
    """The joint law of the whole batch (every random draw enumerated, float64) equals the product
    of the target's per-row laws: each row is lossless and the rows do not leak into one another."""
    target, draft = (copy.deepcopy(m).double() for m in tiny_pair)
    fallback = ms.FallbackDrafter(ms.PromptLookupDrafter(), ms.ModelDrafter(draft))
    drafter = {"generate": None, "chain": draft, "fallback": fallback}[how]

    def run():
        if drafter is None:
            return ms.generate(target, PROMPTS, M, temperature=1.0)
        return ms.speculative_generate(target, drafter, PROMPTS, M, gamma=2, temperature=1.0)

    law = batch_law(exact_law, run, target.config.vocab_size)
    assert float((law - joint_law(target_law, target, PROMPTS, M)).abs().max()) < 1e-12


def test_batched_rows_lossless_chi_square(tiny_pair, target_law, chi2_pvalue):
    """The same on float32 models by sampling: each row's tokens, 400 seeds, against its target
    law."""
    target, draft = tiny_pair
    counts = [torch.zeros((3,) * 3) for _ in PROMPTS]
    for seed in range(400):
        outs = ms.speculative_generate(target, draft, PROMPTS, 3, gamma=3, temperature=1.0,
                                       seed=seed)
        for c, o in zip(counts, outs):
            c[tuple(o.tokens)] += 1
    for c, p in zip(counts, PROMPTS):
        assert chi2_pvalue(c, target_law(target, p, 3)) > 1e-3


# --- negative controls: two classic batching bugs, each caught by the per-row check -------------

def phantom_keys(monkeypatch):
    """Roll a row back (or pad it) by zeroing its entries instead of masking them: they stay in
    attention. RaggedCache.write zeroes every entry past each row's new end; causal_mask lets the
    real tokens see them (a zero key scores 0: softmax weight e^0)."""
    write, mask = RaggedCache.write, ragged.causal_mask

    def zeroing_write(self, layer, k, v, start=None):
        K, V = write(self, layer, k, v, start)  # views of the storage: zeroing them zeroes it
        for b, L in enumerate(self.lengths):
            K[b, :, L + k.shape[2]:], V[b, :, L + k.shape[2]:] = 0, 0
        return K, V

    def seeing_mask(lengths, n_new, T):
        m = mask(lengths, n_new, T)
        for b, (L, n) in enumerate(zip(lengths, n_new)):
            m[b, :n, L + T:] = True  # the zeroed tail, up to the longest row
        return m

    monkeypatch.setattr(RaggedCache, "write", zeroing_write)
    monkeypatch.setattr(ragged, "causal_mask", seeing_mask)  # what feed calls


def uniform_positions(monkeypatch):
    """Advance every row's positions as if it were as long as the longest row: feed's per-row
    positions (B, T) shifted by max(lengths) - lengths[b] on their way into model.embed."""
    feed = loop.feed

    def shifted_feed(model, cache, seqs):
        shift = torch.tensor([max(cache.lengths) - L for L in cache.lengths])
        embed = model.embed
        model.embed = lambda idx, pos: embed(idx, pos + shift[:, None] if pos.dim() == 2 else pos)
        try:  # (1-d positions: every row equally long, nothing to shift)
            return feed(model, cache, seqs)
        finally:
            del model.embed

    monkeypatch.setattr(loop, "feed", shifted_feed)  # every batched call: targets' and drafts'


@pytest.mark.parametrize("bug", [phantom_keys, uniform_positions])
def test_negative_controls_are_caught(shipped_pair, batch_prompts, alone, monkeypatch, bug):
    target, draft = shipped_pair
    prompts, refs = batch_prompts[:4], alone[:4]  # short: shifted positions stay in the block
    assert all(rows_equal_alone(target, draft, prompts, refs, 4))
    bug(monkeypatch)
    same = rows_equal_alone(target, draft, prompts, refs, 4)
    assert not all(same) and same[-1]  # some row wrong; the longest (never padded/shifted) right
    assert [o.tokens for o in ms.generate(target, prompts, N_NEW)] != refs


@pytest.mark.parametrize("bug", [phantom_keys, uniform_positions])
def test_negative_controls_change_the_exact_law(tiny_pair, exact_law, target_law, monkeypatch, bug):
    """At temperature 1 too: under either bug the batch's exact joint law is no longer the product
    of the target's per-row laws. The same run without the bug is test_batched_rows_lossless_exactly
    ["chain"] (same pair, prompts, M and gamma): equal to the product within 1e-12, so the gap here
    is the bug's (enumerating it again here cost 7 s of CI a bug)."""
    target, draft = (copy.deepcopy(m).double() for m in tiny_pair)
    reference = joint_law(target_law, target, PROMPTS, M)

    def run():
        return ms.speculative_generate(target, draft, PROMPTS, M, gamma=2, temperature=1.0)

    bug(monkeypatch)
    law = batch_law(exact_law, run, target.config.vocab_size)
    assert float((law - reference).abs().max()) > 1e-6  # lossless: < 1e-12; the bugs: 1e-4 and more


# --- what cannot batch, and bad input ------------------------------------------------------------

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
    with pytest.raises(ValueError, match=r"in \[0, 256\)"):
        ms.generate(target, [[1, 2], [256]], 4)


def test_ragged_cache_and_feed(shipped_pair):
    """feed: each row's tokens after ITS OWN cached entries, at its own positions, in one pass: the
    logits of each row equal that row's alone; RaggedCache crops per row; bad rows raise."""
    target = shipped_pair[0]
    cache = loop.new_cache(target, 2)
    assert isinstance(cache, RaggedCache) and cache.size == target.config.block_size
    seqs = [[1, 2, 3], [4]]
    h, logits = ms.batch.feed(target, cache, seqs)
    assert cache.lengths == [3, 1] and cache.length == 3 and logits.shape == (2, 3, 256)
    more = [[5], [6, 7]]
    logits2 = ms.batch.feed(target, cache, more)[1]
    assert cache.lengths == [4, 3]
    with torch.no_grad():
        for b in range(2):
            alone = target(torch.tensor([seqs[b] + more[b]]))[0]
            n = len(seqs[b])
            assert torch.allclose(logits[b, :n], alone[:n], atol=1e-4)
            assert torch.allclose(logits2[b, :len(more[b])], alone[n:], atol=1e-4)
            assert torch.allclose(target.lm_head(h[b, :n]), logits[b, :n], atol=1e-5)
    cache.crop([2, 0])  # row 0 keeps [1, 2], row 1 nothing: then each continues on its own
    assert cache.lengths == [2, 0]
    logits3 = ms.batch.feed(target, cache, [[9], [8, 9]])[1]
    with torch.no_grad():
        assert torch.allclose(logits3[0, 0], target(torch.tensor([[1, 2, 9]]))[0, -1], atol=1e-4)
        assert torch.allclose(logits3[1, :2], target(torch.tensor([[8, 9]]))[0], atol=1e-4)
    with pytest.raises(ValueError, match="cannot crop"):
        cache.crop([4, 0])  # row 0 has only 3 entries
    with pytest.raises(ValueError, match="cannot crop"):
        cache.crop([1])  # one length for two rows
    with pytest.raises(ValueError, match="3 rows of tokens for a cache of 2 rows"):
        ms.batch.feed(target, cache, [[1], [2], [3]])
    with pytest.raises(ValueError, match="KV cache holds"):
        ms.batch.feed(target, cache, [[1] * 300, [2]])
    cache.length = 3  # an int: the same for every row
    assert cache.lengths == [3, 3]
    cache.keep(1, [1])  # keep's int start: the same for every row
    assert cache.lengths == [2, 2]
    cache.crop(1)
    assert cache.lengths == [1, 1]


def test_a_ragged_cache_refuses_the_plain_forward(shipped_pair):
    """Rows of different lengths need feed (per-row positions and masks): the plain forward would
    give every row the longest row's positions and no mask (both batching bugs): it must raise.
    Rows of one length may take it (one slice, plain causal attention)."""
    target = shipped_pair[0]
    cache = loop.new_cache(target, 2)
    ms.batch.feed(target, cache, [[1, 2, 3], [4]])
    with pytest.raises(ValueError, match="different lengths"):
        target(torch.tensor([[5], [6]]), cache)
    assert cache.lengths == [3, 1]  # untouched by the refused call
    cache = loop.new_cache(target, 2)
    ms.batch.feed(target, cache, [[1, 2], [3, 4]])
    with torch.no_grad():
        got = target(torch.tensor([[5], [6]]), cache)[:, 0]
        assert cache.lengths == [3, 3]
        want = target(torch.tensor([[1, 2, 5], [3, 4, 6]]))[:, -1]
    assert torch.allclose(got, want, atol=1e-4)


def test_causal_mask_known_answer():
    """Row 0: 2 cached entries, 1 new token, padded to T = 2; row 1: no cache, 2 new tokens. Real
    tokens see their row's entries and themselves (causal); padding sees only itself; nothing sees
    padding or entries past a row's length."""
    m = ms.batch.causal_mask([2, 0], [1, 2], 2)
    assert m.shape == (2, 2, 4)
    assert m[0].int().tolist() == [[1, 1, 1, 0],   # the new token: entries 0, 1 and itself
                                   [0, 0, 0, 1]]   # its padding: itself only
    assert m[1].int().tolist() == [[1, 0, 0, 0],   # no cache: causal over its 2 tokens, nothing
                                   [1, 1, 0, 0]]   # past its length (entries 2, 3: storage)


def test_batch_input_forms(shipped):
    """A list of prompts (lists or 1-d tensors) or a (B, T) tensor is a batch; a (1, T) tensor is
    one prompt."""
    one = ms.generate(shipped, [1, 2, 3], 3).tokens
    two = torch.tensor([[1, 2, 3], [1, 2, 3]])
    assert [r.tokens for r in ms.generate(shipped, two, 3)] == [one, one]
    mixed = [torch.tensor([1, 2, 3]), [1, 2, 3]]
    assert [r.tokens for r in ms.generate(shipped, mixed, 3)] == [one, one]
    assert ms.generate(shipped, torch.tensor([[1, 2, 3]]), 3).tokens == one
    with pytest.raises(ValueError, match="exceeds block_size"):
        ms.generate(shipped, [[1, 2], [1] * 250], 10)  # each prompt is checked on its own
