"""PricedDrafter (minispec/methods/priced.py): the draft length the speedup formula prices best
after each match length, the chance of a kept copy learnt per match length from the call's rounds.
Its match length against the package's own tail_matches; its choices against numbers worked by hand;
the exact law at temperature 1 with lengths 0 to 3 in play, a chi-square, and greedy equality on the
shipped target (test_shipped.py runs it by name too) and on SmolLM2 (test_smollm2.py)."""
import copy
import random

import pytest
import torch

import minispec as ms
from minispec.drafters import PromptLookupDrafter, tail_matches
from minispec.methods import PricedDrafter
from minispec.methods.priced import match_length
from minispec.tree import Tree

STEEP = [1.0, 1.16, 1.27, 1.33, 1.50, 1.64, 1.82, 2.0, 2.2]  # SmolLM2, compact, by hand, filled
FLAT = [1.0] * 9


def test_match_length_is_the_longest_tail_lookup_finds():
    """Against tail_matches (lookup's own search) on random contexts over 3 tokens."""
    rng = random.Random(0)
    for _ in range(300):
        context = [rng.randrange(3) for _ in range(rng.randrange(1, 30))]
        cap = rng.randrange(1, 8)
        expected = next((n for _, n in tail_matches(context, cap)), 0)
        assert match_length(context, cap) == expected, (context, cap)
    assert match_length([1, 2, 3, 9, 2, 3], 6) == 2
    assert match_length([5, 5, 5], 6) == 2  # an occurrence may overlap the tail
    assert match_length([1, 2, 3], 6) == 0


def test_the_length_priced_best_by_hand():
    """alpha = 0.5 (the prior alone) on the steep profile: E[tokens] / v(k + 1) for k = 0..4 is
    1, 1.5 / 1.16 = 1.29, 1.75 / 1.27 = 1.38, 1.875 / 1.33 = 1.41, 1.9375 / 1.5 = 1.29: k = 3.
    On a flat profile every extra guess is free: the loop's gamma. gamma caps it, and the profile's
    length does (beyond it nothing is priced)."""
    assert PricedDrafter(costs=STEEP).length(1, 8) == 3
    assert PricedDrafter(costs=FLAT).length(1, 8) == 8
    assert PricedDrafter(costs=FLAT).length(1, 2) == 2
    assert PricedDrafter(costs=FLAT[:4]).length(1, 8) == 3
    assert PricedDrafter(costs=STEEP, prior=(1.0, 3.0)).length(1, 8) == 1  # alpha 1/4: 1.25 / 1.16
    assert PricedDrafter(costs=[2.0, 2.32, 2.54, 2.66, 3.0]).length(1, 8) == 3  # seconds: scaled


def rejected(drafter, context, gamma=8):
    """One round drafted from context whose guesses the target all rejected."""
    tree = drafter.draft(context, gamma)
    drafter.accept(context, tree, [], None, None)
    return tree


def test_guesses_rarely_kept_stop_after_their_match_length_only():
    """After one-token matches whose guesses are all rejected, alpha_1 falls (Beta(1, 1): 1/2,
    1/3, 1/4, ...), while a guess kept there would go on at match length 2, alpha_2 still the
    prior's 1/2. At alpha_1 = 1/3 three guesses still pay on the steep profile (1.583 / 1.33 = 1.19
    against 1.333 / 1.16 = 1.15 for one); at 1/7 none does (1.143 / 1.16 < 1): a plain step. A
    long match still drafts: its alphas are still the prior's."""
    drafter = PricedDrafter(PromptLookupDrafter(), costs=STEEP)
    one, long = [1, 2, 3, 4, 5, 6, 7, 8, 3], [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6]
    lengths = [len(rejected(drafter, one).tokens) for _ in range(7)]
    assert lengths == [3, 3, 2, 1, 1, 0, 0] and drafter.alpha(1) == pytest.approx(1 / 7)
    assert drafter.alpha(2) == 0.5
    assert drafter.draft(long, 8).tokens == [7, 8, 1]  # alpha 1/2 from match 6 on: 3 guesses
    drafter.reset()  # a new call forgets the rounds
    assert len(drafter.draft(one, 8).tokens) == 3
    flat = PricedDrafter(PromptLookupDrafter(), costs=FLAT)  # free guesses are never dropped
    assert [len(rejected(flat, one).tokens) for _ in range(6)] == [8] * 6


def test_kept_guesses_lengthen_the_draft():
    """A long match (6 tokens) whose copies are all kept: the first 3 tried at match lengths 6, 7
    and 8, so alpha_6 = alpha_7 = alpha_8 = 2/3 (no failure tried); a draft stays at 3 guesses
    until alpha reaches 4/5 (2.95 / 1.33 = 2.22 for 3, 3.69 / 1.64 = 2.25 for 5), then grows."""
    drafter = PricedDrafter(PromptLookupDrafter(), costs=STEEP)
    context, lengths = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6], []
    for _ in range(6):
        tree = drafter.draft(context, 8)
        lengths.append(len(tree.tokens))
        drafter.accept(context, tree, list(range(len(tree.tokens))), None, None)  # all kept
        if len(lengths) == 1:
            assert [drafter.alpha(m) for m in (5, 6, 7, 8, 9)] == [0.5] + [2 / 3] * 4
    assert lengths == [3, 3, 3, 5, 5, 6]


def test_bad_input_is_named(random_gpt):
    with pytest.raises(ValueError, match="drafter must be a Drafter"):
        PricedDrafter("lookup")
    with pytest.raises(ValueError, match="costs must list"):
        PricedDrafter(costs=1.5)
    with pytest.raises(ValueError, match="every cost must be > 0"):
        PricedDrafter(costs=[1.0, -1.0])
    with pytest.raises(ValueError, match="prior must be"):
        PricedDrafter(prior=(1.0, 0.0))
    with pytest.raises(ValueError, match="cap"):
        PricedDrafter(cap=0)
    with pytest.raises(ValueError, match="no cost profile"):
        PricedDrafter().draft([1, 2, 1], 4)
    with pytest.raises(ValueError, match="context must be one sequence"):
        PricedDrafter(costs=FLAT).draft(torch.zeros(2, 3, dtype=torch.long), 4)
    m = random_gpt(vocab_size=16, n_layer=1, n_head=2, n_embd=16, block_size=64)
    with pytest.raises(ValueError, match="takes no option 'gamma'"):
        ms.load_drafter("priced", m, gamma=8)


def test_load_drafter_measures_the_profile(random_gpt):
    """By name, on a model whose block (64) is shorter than the usual 256-token context."""
    m = random_gpt(vocab_size=16, n_layer=1, n_head=2, n_embd=16, block_size=64)
    drafter = ms.load_drafter("priced", m)  # 256 + 9 tokens would not fit: a ValueError before
    assert len(drafter.v) == 9 and all(0 < v < float("inf") for v in drafter.v)
    assert ms.load_drafter("priced", m, costs=STEEP).v == pytest.approx(STEEP)
    assert len(PricedDrafter().price(m, max_gamma=3).v) == 4


def test_price_reads_the_kits_cost_profile(random_gpt, monkeypatch):
    """price() times through costs.step_costs, the kit's cost profile (one loop, not a copy of it):
    k = 1..max_gamma + 1 after 256 tokens (64 - 4 on a 64-token block), divided by t(1)."""
    from minispec.kit import timing
    from minispec.methods import priced
    assert priced.step_costs is timing.step_costs
    asked = []

    def fake(model, ks, context, reps, warmup):
        asked.append((list(ks), context, reps, warmup))
        return {k: 0.01 * k * k for k in ks}
    monkeypatch.setattr(priced, "step_costs", fake)
    m = random_gpt(vocab_size=16, n_layer=1, n_head=2, n_embd=16, block_size=64)
    assert PricedDrafter().price(m, max_gamma=3, reps=7).v == pytest.approx([1, 4, 9, 16])
    big = random_gpt(vocab_size=16, n_layer=1, n_head=2, n_embd=16, block_size=512)
    PricedDrafter().price(big, max_gamma=2)
    assert asked == [([1, 2, 3, 4], 60, 7, 1), ([1, 2, 3], 256, 10, 1)]


def test_exact_law_with_lengths_zero_to_three(tiny_pair, exact_law, dense, target_law):
    """Temperature 1, 4 new tokens over a 3-token vocabulary, every draw enumerated in float64: the
    target's law, with rounds that drafted 0 (where 1 more token was allowed: priced, not cut by
    the answer's end), 1, 2 and 3 tokens in it. A steep profile, so that every kept or rejected
    guess moves k."""
    m = copy.deepcopy(tiny_pair[0]).double()
    prompt, lengths = [1, 2, 0, 1, 2], set()

    def run():
        drafter = PricedDrafter(PromptLookupDrafter(), costs=[1.0, 1.4, 1.45, 1.5])
        res = ms.speculative_generate(m, drafter, prompt, 4, gamma=3, temperature=1.0)
        made = 0
        for step in res.steps:  # a round may draft up to 4 - made - 1 tokens
            if made < 3:
                lengths.add(len(step.tree.tokens))
            made += len(step.path) + 1
        return tuple(res.tokens)

    law = exact_law(run)
    assert {0, 1, 2, 3} <= lengths, lengths
    assert torch.allclose(dense(law, 3, 4), target_law(m, prompt, 4), atol=1e-12, rtol=0)


def test_chi_square_and_greedy_on_the_tiny_pair(tiny_pair, target_law, chi2_pvalue):
    m, prompt, counts = tiny_pair[0], [1, 2, 0, 1, 2], torch.zeros(3, 3, 3)
    for seed in range(400):
        res = ms.speculative_generate(m, PricedDrafter(costs=STEEP[:4]), prompt, 3, gamma=3,
                                      temperature=1.0, seed=seed)
        counts[tuple(res.tokens)] += 1
    assert chi2_pvalue(counts, target_law(m, prompt, 3)) > 1e-3
    greedy = ms.generate(m, prompt, 10).tokens
    assert ms.speculative_generate(m, PricedDrafter(costs=STEEP), prompt, 10, gamma=8).tokens \
        == greedy


def test_a_round_with_nothing_drafted_is_a_plain_step():
    """k = 0: an empty tree; accept counts no guess tried."""
    drafter = PricedDrafter(PromptLookupDrafter(), costs=[1.0, 5.0])  # a guess never pays
    tree = drafter.draft([1, 2, 1], 4)
    assert tree.tokens == [] and isinstance(tree, Tree)
    drafter.accept([1, 2, 1], tree, [], None, None)
    assert drafter.tried[1] == 0 and drafter.kept[1] == 0
