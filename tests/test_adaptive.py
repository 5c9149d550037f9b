"""Adaptive draft length (minispec.adaptive): the schedules do what they say, and stay lossless.

Greedy: identical tokens to generate(). Sampling: the distribution of 3-token continuations on a
4-token vocabulary is enumerated exactly from the target, and speculative samples are checked
against it with a chi-square test (fixed seeds). Negative control: the same check flags a drafter
that proposes its argmax but reports its soft q (a q the token was not drawn from).
"""
import itertools

import pytest
import torch
from scipy.stats import chisquare

import minispec as ms
from minispec.adaptive import ConfidenceDrafter, Fixed, Heuristic, as_policy


def tiny(seed, base=None, noise=0.6, V=4, n_embd=8, block_size=16):
    """A random GPT with peaked distributions (weights ~ N(0, 1)); near `base` if given."""
    torch.manual_seed(seed)
    m = ms.GPT(ms.GPTConfig(vocab_size=V, n_layer=1, n_head=1, n_embd=n_embd, block_size=block_size))
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 1.0)
        if base is not None:
            for p, b in zip(m.parameters(), base.parameters()):
                p.mul_(noise).add_(b)
    return m.eval()


TARGET = tiny(0)
DRAFT = tiny(1, TARGET, noise=0.5)


def test_int_gamma_validation_unchanged():
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="gamma"):
            ms.speculative_generate(TARGET, DRAFT, [1, 2], 3, gamma=bad)
    with pytest.raises(ValueError, match="gamma"):
        Heuristic(0)
    with pytest.raises(ValueError, match="threshold"):
        ConfidenceDrafter(DRAFT, 1.5)
    assert as_policy(3).gamma == 3 and isinstance(as_policy(3), Fixed)


def test_heuristic_schedule_known_answer():
    """+2 after a fully accepted round, -1 otherwise, never below 1, rounds without drafts ignored."""
    h = Heuristic(2)
    seen = []
    for drafted, accepted in [(2, 2), (4, 4), (6, 3), (5, 0), (4, 0), (3, 0), (2, 1), (1, 0), (0, 0), (1, 1),
                              (3, 3), (5, 5), (7, 7)]:
        h.update(ms.Step(list(range(drafted)), accepted, 0))
        seen.append(h.gamma)
    assert seen == [4, 6, 5, 4, 3, 2, 1, 1, 1, 3, 5, 7, 9]
    h.reset()
    assert h.gamma == 2


def policies():
    return [("fixed", DRAFT, 3), ("heuristic", DRAFT, Heuristic(1)),
            ("confidence", ConfidenceDrafter(DRAFT, 0.7), 4),
            ("both", ConfidenceDrafter(DRAFT, 0.7), Heuristic(2))]


@pytest.mark.parametrize("name,draft,gamma", policies(), ids=[p[0] for p in policies()])
def test_greedy_identical_to_generate(name, draft, gamma):
    big_t = tiny(2, V=16, n_embd=16, block_size=64)
    big_d = tiny(3, big_t, V=16, n_embd=16, block_size=64)
    draft = ConfidenceDrafter(big_d, draft.threshold) if isinstance(draft, ConfidenceDrafter) else big_d
    for prompt in ([1], [3, 1, 4, 1, 5], list(range(16)) * 2):
        ref = ms.generate(big_t, prompt, 25).tokens
        res = ms.speculative_generate(big_t, draft, prompt, 25, gamma=gamma)
        assert res.tokens == ref
        if isinstance(gamma, Heuristic):  # the draft length really followed the schedule
            want, made = gamma.start, len(prompt)
            for s in res.steps:
                assert len(s.drafted) <= min(want, 25 - (made - len(prompt)) - 1)
                if not isinstance(draft, ConfidenceDrafter):
                    assert len(s.drafted) == min(want, 25 - (made - len(prompt)) - 1)
                made += s.accepted + 1
                want = want if not s.drafted else (want + 2 if s.bonus else max(1, want - 1))


def test_confidence_drafter_stops_at_the_unsure_token():
    ctx = [1, 2, 3]
    for threshold, lengths in [(0.0, {5}), (1.0, {1})]:  # never unsure / always unsure
        d = ConfidenceDrafter(DRAFT, threshold)
        assert {len(d.propose(ctx, 5)[0])} == lengths
    d = ConfidenceDrafter(DRAFT, 0.7)
    for start in itertools.product(range(4), repeat=2):
        d.reset()
        tokens, q = d.propose(list(start), 6)
        assert q.shape == (len(tokens), 4) and torch.equal(q.argmax(-1), torch.tensor(tokens))
        conf = ms.probs(DRAFT(torch.tensor([list(start) + tokens]))[0, len(start) - 1:-1], 1.0).max(-1).values
        assert (conf[:-1] >= 0.7).all() and (len(tokens) == 6 or conf[-1] < 0.7)


# --- losslessness at temperature 1: exact enumeration + chi-square ---
PROMPT, N_NEW, RUNS = [1, 2], 4, 500


@torch.inference_mode()
def exact_target_dist():
    """P(x1..x4 | prompt) under the target, for all 4^4 continuations."""
    seqs = list(itertools.product(range(4), repeat=N_NEW))
    x = torch.tensor([PROMPT + list(s) for s in seqs])
    p = torch.softmax(TARGET(x), -1)[:, len(PROMPT) - 1:-1]  # (256, 4, V): next-token dists
    probs = p.gather(-1, x[:, len(PROMPT):, None])[..., 0].prod(-1)  # (256,)
    return {s: float(pr) for s, pr in zip(seqs, probs)}


def chi2_pvalue(samples, exact):
    counts = {s: 0 for s in exact}
    for s in samples:
        counts[tuple(s)] += 1
    big = [s for s in exact if exact[s] * len(samples) >= 5]  # pool the rare outcomes into one bin
    obs = [counts[s] for s in big] + [len(samples) - sum(counts[s] for s in big)]
    exp = [exact[s] * len(samples) for s in big] + [len(samples) * (1 - sum(exact[s] for s in big))]
    return chisquare(obs, exp).pvalue


class GreedyWithSoftQ(ConfidenceDrafter):
    """The classic bug: the token is the draft's argmax, but q reported is its softmax."""

    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        tokens, _ = super().propose(context, gamma, 0.0)
        q = ms.probs(self.model(torch.tensor([context + tokens]))[0, len(context) - 1:-1], temperature)
        return tokens, q


@torch.inference_mode()
def test_lossless_at_temperature_1_and_negative_control():
    exact = exact_target_dist()
    assert abs(sum(exact.values()) - 1) < 1e-5
    # Heuristic(2) drafts 2, then 1 or 2 depending on what was kept; the confidence drafter 1 to 3
    runs = {"heuristic": (DRAFT, lambda: Heuristic(2), RUNS),
            "confidence": (ConfidenceDrafter(DRAFT, 0.6), lambda: 3, RUNS),
            "lossy": (GreedyWithSoftQ(DRAFT, 0.6), lambda: Heuristic(2), RUNS // 2)}
    pvalues = {}
    for name, (draft, gamma, n) in runs.items():
        samples = [ms.speculative_generate(TARGET, draft, PROMPT, N_NEW, gamma=gamma(), temperature=1.0,
                                           seed=i).tokens for i in range(n)]
        pvalues[name] = chi2_pvalue(samples, exact)
    assert pvalues["heuristic"] > 1e-3 and pvalues["confidence"] > 1e-3, pvalues
    assert pvalues["lossy"] < 1e-4, pvalues
