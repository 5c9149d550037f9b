"""Drafters: prompt lookup edge cases, exactness of every drafter under greedy and sampling.

Negative control: a drafter that proposes its argmax but reports its soft q (the classic bug)
is flagged by the same chi-square check that the honest drafters pass.
"""
import pytest
import torch
import torch.nn.functional as F

import minispec as ms
from minispec.drafters import FallbackDrafter, ModelDrafter, PromptLookupDrafter
from minispec.model import WEIGHTS_DIR


def test_prompt_lookup_known_answer():
    d = PromptLookupDrafter(max_n=2, vocab_size=10)
    # last 2-gram (5, 6) occurred at the start, followed by 7, 8, 5
    tokens, q = d.propose([5, 6, 7, 8, 5, 6], 3)
    assert tokens == [7, 8, 5]
    assert torch.equal(q, F.one_hot(torch.tensor([7, 8, 5]), 10).float())
    # the continuation stops at gamma; past the end of the context it copies itself (period 2 here)
    assert d.propose([5, 6, 7, 8, 5, 6], 1)[0] == [7]
    assert d.propose([1, 2, 1, 2], 5)[0] == [1, 2, 1, 2, 1]


def test_prompt_lookup_prefers_longest_n_then_most_recent():
    ctx = [1, 2, 7, 3, 2, 8, 1, 2]
    assert PromptLookupDrafter(max_n=1, vocab_size=10).propose(ctx, 2)[0] == [8, 1]  # newest "2"
    assert PromptLookupDrafter(max_n=2, vocab_size=10).propose(ctx, 2)[0] == [7, 3]  # "1 2"
    assert PromptLookupDrafter(max_n=3, vocab_size=10).propose(ctx, 2)[0] == [7, 3]  # no "8 1 2" before: n = 2
    assert PromptLookupDrafter(max_n=2, vocab_size=10).matches([1, 2, 7, 1, 2, 8, 1, 2], 2) == [[8, 1], [7, 1]]
    assert PromptLookupDrafter(max_n=2, vocab_size=10).matches([1, 2, 7, 1, 2, 8, 1, 2], 4) == [[8, 1, 2, 8], [7, 1, 2, 8]]


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_prompt_lookup_empty_and_short(n):
    d = PromptLookupDrafter(max_n=n, min_n=n, vocab_size=10)
    for ctx in ([], [1], [1, 2][:n], list(range(n + 1))):  # too short, or no repeated n-gram
        tokens, q = d.propose(ctx, 4)
        assert tokens == [] and q.shape == (0, 10)
    assert d.propose([7] * (n + 1), 3)[0] == [7, 7, 7]  # a run matches itself shifted by one, and goes on


def test_prompt_lookup_bad_n():
    with pytest.raises(ValueError, match="min_n"):
        PromptLookupDrafter(max_n=2, min_n=3)
    with pytest.raises(ValueError, match="min_n"):
        PromptLookupDrafter(max_n=2, min_n=0)


def test_one_hot_q_is_a_valid_q():
    """Exact: a deterministic draft x (q one-hot) + speculative_accept emits p exactly.
    P(out = x) = min(1, p(x)/1) = p(x); P(out = y != x) = (1 - p(x)) * residual(p, q)(y) = p(y)."""
    p = torch.tensor([0.1, 0.0, 0.6, 0.3])
    for x in range(4):
        q = F.one_hot(torch.tensor(x), 4).float()
        out = (1 - p[x]) * ms.residual(p, q)
        out[x] += p[x]
        assert torch.allclose(out, p)


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_exact_with_every_drafter(random_gpt, gamma):
    target = random_gpt(vocab_size=8, n_layer=2, seed=3)
    draft = random_gpt(vocab_size=8, n_layer=1, seed=4)
    g = torch.Generator().manual_seed(gamma)
    for _ in range(4):
        ids = torch.randint(8, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist()
        ref = ms.generate(target, ids, 20).tokens
        for drafter in (draft, ModelDrafter(draft), PromptLookupDrafter(3, vocab_size=8),
                        PromptLookupDrafter(1, vocab_size=8),
                        FallbackDrafter(PromptLookupDrafter(3, 2, vocab_size=8), ModelDrafter(draft), 2)):
            assert ms.speculative_generate(target, drafter, ids, 20, gamma=gamma).tokens == ref


class ArgmaxWithSoftQ(ModelDrafter):
    """BUGGY on purpose: proposes the draft's argmax but reports the soft q (temperature 1)."""

    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        tokens, _ = super().propose(context, gamma, 0.0)
        logits = self.model(torch.tensor([context + tokens[:-1]]))[0, -len(tokens):]
        return tokens, ms.probs(logits, temperature)


def _two_token_counts(target, drafter, prompt, n, vocab):
    counts = torch.zeros(vocab, vocab)
    for seed in range(n):
        x1, x2 = ms.speculative_generate(target, drafter, prompt, 2, gamma=3, temperature=1.0, seed=seed).tokens
        counts[x1, x2] += 1
    return counts


@torch.no_grad()
def _exact_two_tokens(target, prompt, vocab):
    p1 = ms.probs(target(torch.tensor([prompt]))[0, -1])
    rows = [ms.probs(target(torch.tensor([prompt + [x]]))[0, -1]) for x in range(vocab)]
    return p1[:, None] * torch.stack(rows)  # (V, V): P(x1, x2)


def test_sampling_lossless_with_lookup_and_negative_control(random_gpt, chi2_pvalue):
    V = 3
    target = random_gpt(vocab_size=V, n_layer=1, n_embd=16, seed=5, std=0.1)  # spread-out p and q:
    draft = random_gpt(vocab_size=V, n_layer=1, n_embd=16, seed=15, std=0.1)  # the bug costs TV ~0.25
    prompt = [0, 1, 2, 0, 1]  # "0 1" repeats: prompt lookup proposes 2, 0, 1
    exact = _exact_two_tokens(target, prompt, V)
    for drafter in (PromptLookupDrafter(2, vocab_size=V), ModelDrafter(draft),
                    FallbackDrafter(PromptLookupDrafter(3, 3, vocab_size=V), ModelDrafter(draft))):
        assert chi2_pvalue(_two_token_counts(target, drafter, prompt, 600, V), exact) > 1e-3
    assert chi2_pvalue(_two_token_counts(target, ArgmaxWithSoftQ(draft), prompt, 600, V), exact) < 1e-3


def test_model_drafter_contract(random_gpt):
    d = ModelDrafter(random_gpt(vocab_size=8, n_layer=1, seed=7))
    d.reset()
    tokens, q = d.propose([1, 2, 3], 4, temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert len(tokens) == 4 and q.shape == (4, 8) and torch.allclose(q.sum(-1), torch.ones(4))
    assert all(q[i, t] > 0 for i, t in enumerate(tokens))  # each token was drawn from its q
    d.rollback(2)
    assert d.cache.length == 2
    fresh = ModelDrafter(d.model)
    assert d.propose([1, 2, 3], 3)[0] == fresh.propose([1, 2, 3], 3)[0]  # the cropped cache is reused correctly


def test_fallback_drafter(random_gpt):
    model = ModelDrafter(random_gpt(vocab_size=8, n_layer=1, seed=7))
    d = FallbackDrafter(PromptLookupDrafter(2, 2, vocab_size=8), model, then_gamma=2)
    d.reset()
    assert d.propose([1, 2, 3, 1, 2], 4)[0] == [3, 1, 2, 3] and d.calls == 0  # lookup matched "1 2"
    tokens, q = d.propose([1, 2, 3, 4], 4)  # no repeated 2-gram: the model drafts, at most 2 tokens
    assert len(tokens) == 2 and q.shape == (2, 8) and d.calls == 2


@pytest.mark.skipif(not (WEIGHTS_DIR / "draft_distilled.pt").exists(), reason="distilled draft not trained yet")
def test_distilled_draft_shape_and_gain():
    from minispec.train import agreement, corpus_files, load_bytes
    draft, distilled = ms.load_model("draft"), ms.load_model("draft_distilled")
    assert vars(distilled.config) == vars(draft.config)
    target = ms.load_model("target")
    held = load_bytes(corpus_files()[1])[:16 * 128 + 1]
    plain, better = agreement(target, draft, held, windows=16), agreement(target, distilled, held, windows=16)
    assert better[0] > plain[0] and better[1] > plain[1]  # greedy and sampled acceptance proxies

