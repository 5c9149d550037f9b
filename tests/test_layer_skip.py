"""Layer skipping (minispec/methods/layer_skip.py: S3D, SWIFT): the target drafts with some middle
blocks skipped, on the loop's one KV cache, the set given or searched on the prompt.

Greedy output equals generate's (random float64 GPTs and a random float64 Llama, explicit and
searched sets; the shipped target on held-out prompts); after every round each block's cache holds
exactly the full model's entries, and a drafter that leaves the skipped blocks' entries unfilled
is caught by greedy equality; sampling follows the target's law exactly (enumerated, vocab 8,
float64) and statistically (chi-square on the shipped target), while a rule that keeps every draft
is caught by both; the search finds an identity block, and picks what its objective says.
"""
import itertools

import pytest
import torch

import minispec as ms
from minispec.bridge.llama import Llama, LlamaConfig
from minispec.kit import theory
from minispec.methods import LayerSkipDrafter
from minispec.methods.layer_skip import agreement, block_inputs, search_skip, speedup

PROMPTS = ([1, 2, 3], [5], [(7 * i) % 8 for i in range(1, 30)])


def random_llama(vocab_size=8, n_layer=4, n_embd=16, seed=0, std=0.5):
    """A random float64 Llama with peaked next-token laws (as tests/test_llama.py builds one)."""
    config = LlamaConfig(vocab_size=vocab_size, block_size=64, n_layer=n_layer, n_head=2,
                         n_kv_head=1, n_embd=n_embd, n_hidden=2 * n_embd, rope_base=100.0)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Llama(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" in name or "ln_f" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.normal_(0.0, std, generator=g)
    return model.double().eval()


@pytest.fixture(scope="module")
def gpt64(random_gpt):
    return random_gpt(vocab_size=8, n_layer=4, n_head=2, n_embd=32, seed=3, std=0.3).double()


@pytest.fixture(scope="module")
def llama64():
    return random_llama(std=0.4)


SETTINGS = [dict(skip=[1]), dict(skip=[2]), dict(skip=[1, 2]), dict(skip=[0]), dict(skip=[3]),
            dict(skip=[1, 3]), dict(skip=[]), dict(), dict(max_skip=2),
            dict(min_agreement=0.5), dict(skip=[1, 2], threshold=0.6)]


def greedy_equal(model, settings, gamma, prompts=PROMPTS, n=30):
    drafter, kept = LayerSkipDrafter(model, **settings), 0
    for ids in prompts:
        res = ms.speculative_generate(model, drafter, ids, n, gamma=gamma)
        assert res.tokens == ms.generate(model, ids, n).tokens, (settings, ids)
        kept += sum(s.accepted for s in res.steps)
    return drafter, kept


@pytest.mark.parametrize("gamma", [1, 4])
@pytest.mark.parametrize("settings", SETTINGS, ids=str)
def test_greedy_equals_generate_on_a_random_gpt(gpt64, settings, gamma):
    drafter, kept = greedy_equal(gpt64, settings, gamma)
    assert kept > 0  # (drafts were kept: the drafter is not idle)
    if "skip" in settings:
        assert drafter.skip == tuple(settings["skip"]) and not drafter.tried
    else:
        assert drafter.skip in drafter.tried  # searched on the last prompt


@pytest.mark.parametrize("settings", [dict(skip=[1]), dict(skip=[1, 2]), dict(skip=[2, 3]),
                                      dict(), dict(max_skip=2)], ids=str)
def test_greedy_equals_generate_on_a_random_llama(llama64, settings):
    greedy_equal(llama64, settings, 3)
    greedy_equal(llama64, settings, 1, prompts=PROMPTS[:1])


def test_greedy_on_the_shipped_target_and_by_name(shipped):
    """Held-out prompts the target never trained on; load_drafter("layer_skip", ...) searches."""
    prompts = ms.data.prompts(2, length=96, offset=12)
    for drafter in (ms.load_drafter("layer_skip", shipped), LayerSkipDrafter(shipped, [2, 3])):
        for ids in prompts:
            res = ms.speculative_generate(shipped, drafter, ids, 40, gamma=4)
            assert res.tokens == ms.generate(shipped, ids, 40).tokens
            assert res.stats.tokens_per_call > 1.5
    eos = ms.generate(shipped, prompts[0], 40).tokens[9]
    res = ms.speculative_generate(shipped, drafter, prompts[0], 40, gamma=4, eos_token=eos)
    assert res.tokens == ms.generate(shipped, prompts[0], 40, eos_token=eos).tokens


@pytest.mark.parametrize("which", ["gpt", "llama"])
@pytest.mark.parametrize("skip", [[1], [1, 2], [0, 3], None])
def test_verification_and_every_cache_entry_are_the_full_models(gpt64, llama64, which, skip):
    """Round by round, on the loop's one cache: score's logits are a fresh full pass's, and after
    the roll-back every block (skipped, kept before or after min S) holds exactly the entries a
    fresh full pass writes for the kept positions."""
    m = gpt64 if which == "gpt" else llama64
    d, g = LayerSkipDrafter(m, skip), torch.Generator().manual_seed(0)
    cache = m.new_cache(size=64)
    d.reset(m, cache)
    context = [1, 2, 3, 4]
    with torch.inference_mode():  # as in the loop (the Llama's cache grows in inference mode)
        rounds(m, d, cache, context, g)


def rounds(m, d, cache, context, g):
    for rnd in range(5):
        tree = d.draft(context, 3, 1.0, None, None, g)
        seq = context + tree.tokens
        hidden, logits = d.score(m, cache, context, tree)
        fresh = m(torch.tensor([seq]))[0]
        assert torch.allclose(logits, fresh[-len(logits):], atol=1e-10)
        path = list(range(rnd % 4))
        cache.keep(len(context), path)
        d.accept(context, tree, path, hidden, logits)
        context = seq[:len(context) + len(path)]
        full = m.new_cache(size=64)
        m(torch.tensor([context]), full)
        n = len(context)
        assert torch.allclose(cache.k[:, :, :, :n], full.k[:, :, :, :n], atol=1e-10)
        assert torch.allclose(cache.v[:, :, :, :n], full.v[:, :, :, :n], atol=1e-10)
        context = context + [int(torch.randint(8, (), generator=g))]


@pytest.mark.parametrize("which", ["gpt", "llama"])
def test_the_first_rounds_drafts_are_the_skipped_models(gpt64, llama64, which):
    """Greedy drafts after the prompt: draft i is the argmax of a plain pass (no cache) of the
    blocks outside S over the prompt and drafts 1..i-1, ended by ln_f and the head."""
    m, skip, ids = (gpt64 if which == "gpt" else llama64), (1, 2), [3, 1, 4, 1, 5]
    d = LayerSkipDrafter(m, skip)
    tree = d.draft(ids, 5)
    for i, token in enumerate(tree.tokens):
        x = torch.tensor([ids + tree.tokens[:i]])
        with torch.no_grad():
            h = m.blocks(m.embed(x, torch.arange(x.shape[1])), layers=[0, 3])
            assert token == int(m.lm_head(m.ln_f(h))[0, -1].argmax())


class NoRefill(LayerSkipDrafter):
    """Wrong on purpose (a negative control): verification runs every block, but the skipped
    blocks' entries for the round's new positions are put back as drafting left them (never
    written), as if the full target's pass had not filled them."""

    def score(self, target, cache, context, tree):
        start = self.deep
        k, v = cache.k.clone(), cache.v.clone()
        out = super().score(target, cache, context, tree)
        for j in self.skip:
            cache.k[j, :, :, start:] = k[j, :, :, start:]
            cache.v[j, :, :, start:] = v[j, :, :, start:]
        return out


def test_unfilled_skipped_entries_are_caught_by_greedy_equality(gpt64):
    wrong = [ms.speculative_generate(gpt64, NoRefill(gpt64, [1, 2]), ids, 30, gamma=4).tokens
             != ms.generate(gpt64, ids, 30).tokens for ids in PROMPTS]
    assert sum(wrong) >= 2
    greedy_equal(gpt64, dict(skip=[1, 2]), 4)  # the drafter itself: exact on the same prompts


@pytest.fixture(scope="module")
def tiny64(random_gpt):
    """Vocabulary 8, 4 blocks, float64: the law of 2 new tokens has 64 outcomes, of 3 new tokens
    under top-3 sampling 27 (the loop's draws of several rounds enumerated in seconds)."""
    return random_gpt(vocab_size=8, n_layer=4, n_head=1, n_embd=16, block_size=16, seed=7,
                      std=0.8).double()


def keep_every_draft(cands, q, p, generator=None):
    return cands[0]


@pytest.mark.parametrize("settings,gamma,n,top_k", [
    (dict(skip=[1, 2]), 2, 2, None), (dict(max_skip=1), 2, 2, None),
    (dict(skip=[0, 3]), 1, 2, None),
    (dict(skip=[1, 2]), 2, 3, 3), (dict(skip=[2]), 3, 3, 3), (dict(max_skip=2), 2, 3, 3),
    (dict(skip=[1], threshold=0.9), 3, 3, 3)], ids=str)  # a stop that fires: tested below
def test_sampling_exact_law(tiny64, exact_law, dense, target_law, settings, gamma, n, top_k):
    """Temperature 1 (top_k None: the plain law; top_k 3: several rounds, 27 outcomes)."""
    drafter = LayerSkipDrafter(tiny64, **settings)

    def run():
        return tuple(ms.speculative_generate(tiny64, drafter, [1, 2], n, gamma=gamma,
                                             temperature=1.0, top_k=top_k).tokens)

    law = exact_law(run)
    want = target_law(tiny64, [1, 2], n, top_k=top_k)
    assert len(law) == 8 ** n if top_k is None else len(law) == 27
    assert torch.allclose(dense(law, 8, n), want, atol=1e-12, rtol=0)


def test_the_confidence_stop_setting_ends_rounds_early(tiny64):
    """The threshold setting above tests the stop only if it fires: its rounds differ from
    the same skip's without one (at 0.6 the stop only ever fell on a round's last draft)."""
    def sizes(drafter):
        return [[len(s.tree.tokens) for s in ms.speculative_generate(
            tiny64, drafter, [1, 2], 3, gamma=3, temperature=1.0, seed=seed).steps]
            for seed in range(8)]
    assert sizes(LayerSkipDrafter(tiny64, [1], threshold=0.9)) != sizes(
        LayerSkipDrafter(tiny64, [1]))


def test_a_rule_that_keeps_every_draft_is_caught_exactly(tiny64, exact_law, dense, target_law):
    """(Block 3 skipped: on this model a draft far enough from the target to be seen.)"""
    drafter = LayerSkipDrafter(tiny64, [3])

    def run():
        return tuple(ms.speculative_generate(tiny64, drafter, [1, 2], 2, gamma=2, temperature=1.0,
                                             rule=keep_every_draft).tokens)

    gap = dense(exact_law(run), 8, 2) - target_law(tiny64, [1, 2], 2)
    assert 0.5 * float(gap.abs().sum()) > 0.05


PROMPT = ms.encode("self.a = self.")  # spread next-byte laws on the shipped target


def two_token_law(model):
    """P(x1, x2 | PROMPT) of the shipped target at temperature 1: (256, 256), float64."""
    with torch.no_grad():
        lp1 = torch.log_softmax(model(torch.tensor([PROMPT]))[0, -1].double(), -1)  # (V,)
        after = model(torch.tensor([PROMPT + [x] for x in range(256)]))[:, -1]  # (V, V)
    return (lp1[:, None] + torch.log_softmax(after.double(), -1)).exp()


@pytest.mark.parametrize("rule", ["lossless", "keeps every draft"])
def test_chi_square_on_the_shipped_target(shipped, chi2_pvalue, rule):
    """The first new token after PROMPT, seeds 0..599, gamma 4, blocks 2 and 3 skipped. The
    negative control is the same drafter and count keeping every draft (it moves x1's law by a TV
    of about 0.19 here). The joint law of two tokens, 65,536 cells, was too sparse for either."""
    kw = {} if rule == "lossless" else dict(rule=keep_every_draft)
    drafter, counts = LayerSkipDrafter(shipped, [2, 3]), torch.zeros(256)
    for seed in range(600):
        x1 = ms.speculative_generate(shipped, drafter, PROMPT, 2, gamma=4, temperature=1.0,
                                     seed=seed, **kw).tokens[0]
        counts[x1] += 1
    p = chi2_pvalue(counts, two_token_law(shipped).sum(1))
    assert p > 1e-3 if rule == "lossless" else p < 1e-6


def identity_blocks(model, blocks):
    """Zero the output projections of these blocks: each then adds nothing, h_{l+1} = h_l."""
    with torch.no_grad():
        for j in blocks:
            for p in (*model.h[j].attn.c_proj.parameters(), *model.h[j].mlp.c_proj.parameters()):
                p.zero_()
    return model


@pytest.mark.parametrize("blocks", [[3], [2], [1, 4]])
def test_the_search_finds_identity_blocks(random_gpt, blocks):
    m = identity_blocks(random_gpt(vocab_size=16, n_layer=6, n_head=2, n_embd=32, seed=11,
                                   std=0.3).double(), blocks)
    ids = [(5 * i) % 16 for i in range(40)]
    skip, tried = search_skip(m, ids, gamma=4, max_skip=len(blocks))
    assert skip == tuple(blocks) and tried[skip] == 1.0
    assert all(a < 1.0 for s, a in tried.items() if not set(s) <= set(blocks))  # (not trivial)
    skip, tried = search_skip(m, ids, max_skip=len(blocks) + 1, min_agreement=1.0)
    assert skip == tuple(blocks)  # the largest set that agrees everywhere
    d = LayerSkipDrafter(m, max_skip=len(blocks))
    res = ms.speculative_generate(m, d, ids, 20, gamma=4)
    assert d.skip == tuple(blocks) and res.tokens == ms.generate(m, ids, 20).tokens
    assert sum(s.accepted for s in res.steps) == sum(len(s.tree.tokens) for s in res.steps)


def test_the_search_picks_what_its_objective_says(shipped):
    """On a held-out prompt: a(S) is the share of positions where a plain pass without S (no
    shared prefix) has the full model's top-1; the path holds, per size, the best one-block
    extension of the last; the default objective is the best speedup on it, min_agreement the
    largest set reaching it."""
    ids = ms.data.prompts(1, length=64, offset=3)[0]
    N = shipped.config.n_layer
    skip, tried = search_skip(shipped, ids, gamma=4, max_skip=4)
    x = torch.tensor([ids])
    with torch.no_grad():
        full = shipped(x)[0].argmax(-1)
        for s, a in tried.items():
            h = shipped.embed(x, torch.arange(len(ids)))
            for j in range(N):
                h = h if j in s else shipped.h[j](h)
            top = shipped.lm_head(shipped.ln_f(h))[0].argmax(-1)
            assert a == float((top == full).double().mean())
    assert agreement(shipped, ids, list(tried)) == list(tried.values())
    path, last = [], ()
    for size in range(1, 5):
        grown = [s for s in itertools.combinations(range(1, N - 1), size) if set(last) <= set(s)]
        assert set(grown) <= set(tried)
        last = max(grown, key=tried.get)
        path.append(last)
    assert skip == max(path, key=lambda s: theory.speedup(tried[s], 4, (N - len(s)) / N))
    for t in (0.0, 0.8, 0.9, 1.0):
        want = [s for s in path if tried[s] >= t] or path[:1]
        assert search_skip(shipped, ids, 4, 4, min_agreement=t)[0] == want[-1]
    assert len(block_inputs(shipped, ids)) == N + 1


def test_the_objective_is_the_kits_speedup():
    for a, gamma, skipped, n in ((0.0, 4, 2, 6), (0.5, 4, 2, 6), (0.9, 3, 10, 30), (1.0, 4, 1, 6)):
        c = (n - skipped) / n
        assert speedup(a, gamma, skipped, n) == pytest.approx(theory.speedup(a, gamma, c))


def test_confidence_stop_and_search_per_prompt(gpt64):
    """threshold 1: one draft a round; a searched set is searched again for each new prompt."""
    res = ms.speculative_generate(gpt64, LayerSkipDrafter(gpt64, [1], threshold=1.0), [1, 2], 20,
                                  gamma=5)
    assert all(len(s.tree.tokens) == 1 for s in res.steps[:-1])
    d = LayerSkipDrafter(gpt64)
    for ids in PROMPTS:
        ms.speculative_generate(gpt64, d, ids, 5)
        assert d.skip == search_skip(gpt64, ids, 4)[0]


def test_by_name_on_a_llama_and_in_a_fallback(llama64):
    d = ms.load_drafter("layer_skip", llama64, skip=[1, 2])
    assert isinstance(d, LayerSkipDrafter)
    res = ms.speculative_generate(llama64, ms.FallbackDrafter(ms.PromptLookupDrafter(2), d),
                                  PROMPTS[2], 30, gamma=3)
    assert res.tokens == ms.generate(llama64, PROMPTS[2], 30).tokens
    with pytest.raises(ValueError, match="no option"):
        ms.load_drafter("layer_skip", llama64, k=2)


@pytest.mark.parametrize("kw,match", [
    (dict(skip=[6]), "out of range"), (dict(skip=[-1]), "skipped block"),
    (dict(skip=range(6)), "no block"), (dict(skip=[1.5]), "skipped block"),
    (dict(skip="12"), "collection"), (dict(skip=3), "collection"),
    (dict(max_skip=0), "max_skip"), (dict(max_skip=5), "max_skip"),
    (dict(max_skip=2.5), "max_skip"),
    (dict(min_agreement=1.5), "min_agreement"), (dict(threshold=2), "threshold"),
    (dict(skip=[1], max_skip=2), "without skip")])
def test_bad_settings_raise(random_gpt, kw, match):
    m = random_gpt(vocab_size=8, n_layer=6, n_head=2, n_embd=16)
    with pytest.raises(ValueError, match=match):
        LayerSkipDrafter(m, **kw)


def test_a_list_of_prompts_is_refused(gpt64):
    with pytest.raises(ValueError, match="one prompt at a time"):
        ms.speculative_generate(gpt64, LayerSkipDrafter(gpt64, [1]), [[1, 2], [3]], 4)


def test_a_search_needs_middle_blocks_and_a_drafter_its_model(random_gpt):
    two = random_gpt(vocab_size=8, n_layer=2, n_head=2, n_embd=16)
    with pytest.raises(ValueError, match="middle blocks"):
        LayerSkipDrafter(two)
    assert LayerSkipDrafter(two, [1]).skip == (1,)
    other = random_gpt(vocab_size=8, n_layer=2, n_head=2, n_embd=16, seed=1)
    with pytest.raises(ValueError, match="LayerSkipDrafter"):
        ms.speculative_generate(other, LayerSkipDrafter(two, [1]), [1, 2], 4)
