"""MatchLengthDrafter (minispec/methods/match_length.py): the loop's gamma after a long match, at
most `short` after a short one, and what to copy left to the drafter inside. The exact law and a
chi-square at temperature 1 here; greedy equality in test_methods.py (the tiny GPT) and
test_smollm2.py (SmolLM2)."""
import copy

import pytest
import torch
from test_edit_lookup import ANSWER, PROMPT, rounds

import minispec as ms
from minispec.drafters import PromptLookupDrafter
from minispec.methods import EditLookupDrafter, MatchLengthDrafter

TEXT = list(range(1, 11))  # ten distinct tokens


def test_a_long_match_drafts_the_loops_gamma():
    """The context ends with 1..6, which occurs earlier (6 tokens: long): all 8 tokens are drafted,
    lookup's copy from its newest 3-gram match (4 5 6 at the start)."""
    tree = MatchLengthDrafter().draft(TEXT + [1, 2, 3, 4, 5, 6], 8)
    assert tree.tokens == [7, 8, 9, 10, 1, 2, 3, 4]


def test_a_short_match_drafts_at_most_short():
    """The context ends with 8 9 10 4 5 6: only its last 3 tokens occur earlier, so 3 are drafted
    where plain lookup drafts 8; a longer `short` drafts more, and gamma below `short` caps it."""
    context = TEXT + [4, 5, 6]
    assert PromptLookupDrafter().draft(context, 8).tokens == [7, 8, 9, 10, 4, 5, 6, 7]
    assert MatchLengthDrafter().draft(context, 8).tokens == [7, 8, 9]
    assert MatchLengthDrafter(short=5).draft(context, 8).tokens == [7, 8, 9, 10, 4]
    assert MatchLengthDrafter().draft(context, 2).tokens == [7, 8]
    assert MatchLengthDrafter(long=3).draft(context, 8).tokens == [7, 8, 9, 10, 4, 5, 6, 7]


def test_a_one_token_match_drafts_at_most_single():
    """The context ends with 10 5: only its last token occurs earlier. By default that is a short
    match (3 drafted); single=1 drafts 1 and single=0 none, while a 2-token match (4 5) still
    drafts `short`; `single` unset follows `short`."""
    one, two = TEXT + [5], TEXT + [4, 5]
    assert MatchLengthDrafter().draft(one, 8).tokens == [6, 7, 8]
    assert MatchLengthDrafter(single=1).draft(one, 8).tokens == [6]
    assert MatchLengthDrafter(single=0).draft(one, 8).tokens == []
    assert MatchLengthDrafter(single=1).draft(two, 8).tokens == [6, 7, 8]
    assert MatchLengthDrafter(short=5).draft(one, 8).tokens == [6, 7, 8, 9, 10]
    with pytest.raises(ValueError, match="single must be an integer >= 0"):
        MatchLengthDrafter(single=-1)
    with pytest.raises(ValueError, match="single"):
        MatchLengthDrafter(single=1.5)


def test_no_match_drafts_nothing_and_depth_is_kept():
    assert MatchLengthDrafter().draft(TEXT, 8).tokens == []
    assert MatchLengthDrafter().draft(TEXT + [1, 2, 3, 4, 5, 6], 8, depth=2).tokens == [7, 8]


def test_the_drafter_inside_keeps_its_state():
    """Around the edit lookup, with every match 'long' (long=1), the rounds are the edit lookup's
    own, its learnt edit included: reset and accept reach it."""
    ours = rounds(MatchLengthDrafter(EditLookupDrafter(), long=1), PROMPT, ANSWER)
    assert ours == rounds(EditLookupDrafter(), PROMPT, ANSWER)
    assert [4, 5, 9] in [draft for _, draft in ours]  # the learnt edit (7 8 -> 9) was drafted


def test_registry_and_bad_options(random_gpt):
    m = random_gpt(vocab_size=16, n_layer=1, n_head=2, n_embd=16, block_size=64)
    drafter = ms.load_drafter("match_length", m, drafter=EditLookupDrafter(), short=2)
    assert isinstance(drafter.drafter, EditLookupDrafter) and drafter.short == 2
    with pytest.raises(ValueError, match="drafter must be a Drafter"):
        MatchLengthDrafter(drafter="lookup")
    with pytest.raises(ValueError, match="short"):
        MatchLengthDrafter(short=0)
    with pytest.raises(ValueError, match="long"):
        MatchLengthDrafter(long=1.5)
    with pytest.raises(ValueError, match="takes no option 'gamma'"):
        ms.load_drafter("match_length", m, gamma=8)


def test_exact_law_with_both_lengths_drafted(tiny_pair, exact_law, dense, target_law):
    """Temperature 1, 4 new tokens over a 3-token vocabulary, the loop's draws enumerated in
    float64: the target's law. The prompt ends with a 2-token match (1 2), so the first round
    drafts 3 tokens (long=2) and later rounds after a 1-token match draft 1 (short=1): both
    rules are in the law."""
    m = copy.deepcopy(tiny_pair[0]).double()  # the shared fixture stays float32
    prompt, lengths = [1, 2, 0, 1, 2], set()

    def run():
        res = ms.speculative_generate(m, MatchLengthDrafter(short=1, long=2), prompt, 4, gamma=3,
                                      temperature=1.0)
        lengths.update(len(step.tree.tokens) for step in res.steps)
        return tuple(res.tokens)

    law = exact_law(run)
    assert {1, 3} <= lengths
    assert torch.allclose(dense(law, 3, 4), target_law(m, prompt, 4), atol=1e-12, rtol=0)


def test_exact_law_with_all_three_lengths(tiny_pair, exact_law, dense, target_law):
    """As above with single=1, short=2, long=3: the prompt's last 2 tokens (1 2) recur, so the
    first round drafts 2; a later round after a one-token match drafts 1."""
    m = copy.deepcopy(tiny_pair[0]).double()
    prompt, lengths = [1, 2, 0, 1, 2], set()

    def run():
        res = ms.speculative_generate(m, MatchLengthDrafter(short=2, long=3, single=1), prompt,
                                      4, gamma=3, temperature=1.0)
        lengths.update(len(step.tree.tokens) for step in res.steps)
        return tuple(res.tokens)

    law = exact_law(run)
    assert {1, 2} <= lengths
    assert torch.allclose(dense(law, 3, 4), target_law(m, prompt, 4), atol=1e-12, rtol=0)


def test_chi_square_at_temperature_1(tiny_pair, target_law, chi2_pvalue):
    """The same prompt in float32, 400 seeded decodes of 3 tokens against the target's law."""
    m, prompt, counts = tiny_pair[0], [1, 2, 0, 1, 2], torch.zeros(3, 3, 3)
    for seed in range(400):
        res = ms.speculative_generate(m, MatchLengthDrafter(short=1, long=2), prompt, 3, gamma=3,
                                      temperature=1.0, seed=seed)
        counts[tuple(res.tokens)] += 1
    assert chi2_pvalue(counts, target_law(m, prompt, 3)) > 1e-3
