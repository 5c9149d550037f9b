"""EditLookupDrafter (minispec/methods/edit_lookup.py): the edits it learns and drafts, on known
answers, and that it is prompt lookup until it has learnt one; greedy equality and the exact law
run in test_methods.py, test_llama.py and test_smollm2.py."""
import random

import pytest

import minispec as ms
from minispec.methods import EditLookupDrafter

# A text with the typo "7 8" twice (as " te" + "h" for " the"), then a separator (0); the answer
# copies it with "7 8" written as 9 each time.
TEXT = [1, 2, 7, 8, 3, 4, 5, 7, 8, 6]
PROMPT = TEXT + [0]
ANSWER = [1, 2, 9, 3, 4, 5, 9, 6]


def rounds(drafter, prompt, answer, gamma=3):
    """Run `drafter` against a known answer as the loop would at temperature 0 -> each round's
    (answer tokens so far, draft), the target keeping the draft's longest prefix that agrees."""
    out, t = [], 0
    while t < len(answer):
        context = prompt + answer[:t]
        tree = drafter.draft(context, gamma, depth=len(answer) - t - 1)
        kept = 0
        while kept < len(tree.tokens) and tree.tokens[kept] == answer[t + kept]:
            kept += 1
        drafter.accept(context, tree, list(range(kept)), None, None)
        out.append((answer[:t], tree.tokens))
        t += kept + 1
    return out


def test_an_edit_made_once_is_drafted_the_next_time():
    """Round by round: lookup's draft through the first typo is rejected at 7 (the answer writes
    9); the answer rejoins the text at 3, so 7 8 -> 9 is learnt; after 5 the drafter drafts 9 6
    where plain lookup drafts the typo again."""
    drafter = EditLookupDrafter()
    got = dict((tuple(a), d) for a, d in rounds(drafter, PROMPT, ANSWER))
    assert got[(1,)] == [2, 7, 8]  # the answer leaves the text at 7
    assert drafter.edits == {(7, 8): (9,)}
    assert got[(1, 2, 9, 3)] == [4, 5, 9]  # the edit drafted, still three tokens
    assert ms.PromptLookupDrafter().match(PROMPT + ANSWER[:4], 3) == [4, 5, 7]
    lookup = dict((tuple(a), d) for a, d in rounds(ms.PromptLookupDrafter(), PROMPT, ANSWER))
    assert len(got) < len(lookup)  # fewer rounds for the same answer


def test_a_wrong_one_token_guess_does_not_lose_the_edit():
    """With 9 6 earlier in the prompt, the round after the answer writes 9 guesses 6 from that
    1-gram match and is rejected; the drafter still remembers where the answer left the text,
    and learns 7 8 -> 9 when it rejoins at 3."""
    drafter = EditLookupDrafter()
    got = dict((tuple(a), d) for a, d in rounds(drafter, [9, 6, 0] + PROMPT, ANSWER))
    assert got[(1, 2, 9)] == [6, 0, 1]  # the wrong guess
    assert drafter.edits == {(7, 8): (9,)}


def test_insertions_and_deletions_teach_nothing():
    """An answer that adds a token (5 -> 5 0) and rejoins where it left learns no edit (nothing
    of the text was replaced); an answer that drops tokens (7 8) learns none either (a deletion
    would delete every later copy of them)."""
    inserted = EditLookupDrafter()
    rounds(inserted, PROMPT, [1, 2, 7, 8, 3, 4, 5, 0, 7, 8, 6])
    assert inserted.edits == {}
    dropped = EditLookupDrafter()
    rounds(dropped, PROMPT, [1, 2, 3, 4, 5, 6])
    assert dropped.edits == {}


def test_without_an_edit_it_drafts_what_lookup_drafts():
    """A fresh drafter (no edit learnt) drafts prompt lookup's tokens, periodic copies included,
    on random contexts over a small vocabulary (many matches)."""
    rng = random.Random(0)
    for _ in range(300):
        context = [rng.randrange(4) for _ in range(rng.randrange(1, 20))]
        gamma = rng.randrange(1, 6)
        assert (EditLookupDrafter().draft(context, gamma).tokens
                == ms.PromptLookupDrafter().match(context, gamma))


def test_a_replacement_longer_than_its_source_and_the_depth():
    """An edit may write more tokens than it replaces; the draft still stops at gamma, and at
    depth (the tokens still wanted)."""
    drafter = EditLookupDrafter()
    drafter.edits = {(7,): (9, 9, 9)}
    assert drafter.draft([2, 7, 3, 0, 2], 4).tokens == [9, 9, 9, 3]
    assert drafter.draft([2, 7, 3, 0, 2], 4, depth=2).tokens == [9, 9]
    assert drafter.draft([1, 2, 3], 4).tokens == []  # no match: nothing


def test_reset_forgets_the_edits():
    drafter = EditLookupDrafter()
    rounds(drafter, PROMPT, ANSWER)
    assert drafter.edits
    drafter.reset(None, None)
    assert drafter.edits == {} and drafter.gap is None


def test_the_loop_with_it_equals_greedy_on_the_tiny_target():
    target = ms.load_model("target")
    ids = ms.encode("teh cat sat on teh mat. the cat sat on the mat. teh dog")
    res = ms.speculative_generate(target, EditLookupDrafter(), ids, 40, gamma=3)
    assert res.tokens == ms.generate(target, ids, 40).tokens


def test_options_are_checked():
    with pytest.raises(ValueError, match="max_n"):
        EditLookupDrafter(max_n=0)
    with pytest.raises(ValueError, match="span"):
        EditLookupDrafter(span=0)
    target = ms.load_model("target")
    assert isinstance(ms.load_drafter("edit_lookup", target, span=2), EditLookupDrafter)
    with pytest.raises(ValueError, match="takes no option"):
        ms.load_drafter("edit_lookup", target, window=3)
