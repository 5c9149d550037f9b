"""Adaptive draft length (minispec.adaptive): the schedules do what they say, and stay lossless.

Greedy: identical tokens to generate(). Sampling: the loop's exact law (float64, its draws
enumerated) and a chi-square over 600 fixed seeds, against the target's law of N_NEW = 5 new tokens
(enough that the heuristic's lengths, not only the cap of tokens left, decide the rounds). Negative
control: the same checks flag a drafter that proposes its argmax but reports its soft q, under the
same schedule.
"""
import copy

import pytest
import torch

import minispec as ms
from minispec.adaptive import Fixed, Heuristic, as_policy


def test_gamma_validation(byte_pair):
    target, draft = byte_pair
    for bad in (0, -1, 2.5, True, "4", None):
        with pytest.raises(ValueError, match="gamma"):
            ms.speculative_generate(target, draft, [1, 2], 3, gamma=bad)
        with pytest.raises(ValueError, match="gamma"):
            Heuristic(bad)
    assert as_policy(3).gamma == 3 and isinstance(as_policy(3), Fixed)
    h = Heuristic(2)
    assert as_policy(h) is h


def step(drafted, accepted):
    """The record of a round that drafted a chain of `drafted` tokens and kept `accepted` of
    them."""
    return ms.Step(ms.Tree.chain(list(range(drafted))), list(range(accepted)), 0)


def test_heuristic_schedule_known_answer():
    """+2 after a fully accepted round, -1 otherwise, never below 1, rounds without drafts
    ignored."""
    h, seen = Heuristic(2), []
    for drafted, accepted in [(2, 2), (4, 4), (6, 3), (5, 0), (4, 0), (3, 0), (2, 1), (1, 0),
                              (0, 0), (1, 1), (3, 3), (5, 5), (7, 7)]:
        h.update(step(drafted, accepted))
        seen.append(h.gamma)
    assert seen == [4, 6, 5, 4, 3, 2, 1, 1, 1, 3, 5, 7, 9]
    h.reset()
    assert h.gamma == 2
    f = Fixed(3)
    f.update(step(3, 3))
    assert f.gamma == 3


@pytest.fixture(scope="module")
def pair16(random_gpt):
    target = random_gpt(vocab_size=16, n_layer=2, n_embd=16, block_size=64, seed=2, std=0.8)
    draft = copy.deepcopy(target)
    with torch.no_grad():  # a draft near the target: rounds keep anything from 0 to all drafts
        for p in draft.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    return target, draft


POLICIES = {"fixed": (lambda d: d, lambda: 3), "heuristic": (lambda d: d, lambda: Heuristic(1)),
            "confidence": (lambda d: ms.ModelDrafter(d, threshold=0.7), lambda: 4),
            "both": (lambda d: ms.ModelDrafter(d, threshold=0.7), lambda: Heuristic(2))}


@pytest.mark.parametrize("name", POLICIES)
def test_greedy_identical_to_generate(pair16, name):
    target, draft = pair16
    make, gamma = POLICIES[name]
    for prompt in ([1], [3, 1, 4, 1, 5], list(range(16)) * 2):
        policy = gamma()
        res = ms.speculative_generate(target, make(draft), prompt, 25, gamma=policy)
        assert res.tokens == ms.generate(target, prompt, 25).tokens
        if isinstance(policy, Heuristic):  # the draft length really followed the schedule
            want, made = policy.start, 0
            for s in res.steps:
                room = min(want, 25 - made - 1)
                n = len(s.tree.tokens)
                assert n == room if name == "heuristic" else n <= room
                made += s.accepted + 1
                want = want if not s.tree.tokens else (want + 2 if s.bonus else max(1, want - 1))
            assert len({len(s.tree.tokens) for s in res.steps}) > 1  # (the length did change)


# --- losslessness at temperature 1 ---------------------------------------------------------------

PROMPT, N_NEW = [1, 2], 5  # 3 ** 5 outcomes; the exact enumeration takes ~2 s


@pytest.fixture(scope="module")
def flat_pair(random_gpt):
    """Vocabulary 3, less peaked than conftest's tiny_pair: a draft's argmax is then far from a draw
    of it."""
    cfg = dict(vocab_size=3, n_head=1, n_embd=16, block_size=16, std=0.5)
    return random_gpt(n_layer=2, seed=7, **cfg), random_gpt(n_layer=1, seed=8, **cfg)


class GreedyWithSoftQ(ms.ModelDrafter):
    """The classic bug: the token is the draft's argmax, but q reported is its softmax."""

    @torch.no_grad()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        tokens = super().draft(context, gamma, 0.0, depth=depth).tokens
        logits = self.model(torch.tensor([list(context) + tokens]))[0, len(context) - 1:-1]
        return ms.Tree.chain(tokens, list(ms.probs(logits, temperature)))


RUNS = {"heuristic": (lambda d: d, lambda: Heuristic(1)),
        "confidence": (lambda d: ms.ModelDrafter(d, threshold=0.8), lambda: 2),
        "lossy": (lambda d: GreedyWithSoftQ(d), lambda: Heuristic(1))}


def schedule_seen(steps):
    """(a round after the first drafted fewer than the N_NEW - made - 1 tokens left: the schedule,
    not the cap, set its length; a round drafted more than the one before: the +2 fired, which no
    fixed gamma shows, as its lengths min(gamma, cap) never grow while the cap falls)."""
    made, below, grew = 0, False, False
    lengths = [len(s.tree.tokens) for s in steps]
    for i, s in enumerate(steps):
        below |= i > 0 and 0 < lengths[i] < N_NEW - made - 1
        grew |= i > 0 and lengths[i] > lengths[i - 1]
        made += s.accepted + 1
    return below, grew


@pytest.mark.parametrize("name", RUNS)
def test_lossless_at_temperature_1_and_negative_control(flat_pair, exact_law, dense, target_law,
                                                        chi2_pvalue, name):
    make, gamma = RUNS[name]
    target, draft = (copy.deepcopy(m).double() for m in flat_pair)
    schedules = set()

    def run():
        res = ms.speculative_generate(target, make(draft), PROMPT, N_NEW, gamma=gamma(),
                                      temperature=1.0)
        schedules.add(schedule_seen(res.steps))
        return tuple(res.tokens)

    law = exact_law(run)
    # Heuristic(1): some outcome's rounds followed the schedule, not the cap
    if name != "confidence":
        assert any(below for below, _ in schedules) and any(grew for _, grew in schedules)
    tv = 0.5 * float((dense(law, 3, N_NEW) - target_law(target, PROMPT, N_NEW)).abs().sum())
    target, draft = flat_pair
    counts = torch.zeros((3,) * N_NEW)
    for seed in range(600):
        res = ms.speculative_generate(target, make(draft), PROMPT, N_NEW, gamma=gamma(),
                                      temperature=1.0, seed=seed)
        counts[tuple(res.tokens)] += 1
    pvalue = chi2_pvalue(counts, target_law(target, PROMPT, N_NEW))
    if name == "lossy":
        assert tv > 0.05 and pvalue < 1e-6
    else:
        assert tv < 1e-12 and pvalue > 1e-3


def test_heuristic_ignores_a_round_without_drafts():
    """A round that drafted nothing (prompt lookup without a match) says nothing about gamma."""
    h = Heuristic(4)
    h.update(ms.Step(ms.Tree(), [], 7))
    assert h.gamma == 4
    h.update(ms.Step(ms.Tree.chain([1, 2]), [0], 7))  # a rejection does shorten it
    assert h.gamma == 3
