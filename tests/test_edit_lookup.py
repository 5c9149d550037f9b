"""EditLookupDrafter (minispec/methods/edit_lookup.py): the edits it learns, forgets and drafts,
on known answers, and that it is prompt lookup until it has learnt one. Greedy equality runs in
test_methods.py, test_llama.py and test_smollm2.py; the exact law and a chi-square at temperature
1 in test_methods.py, with edits seeded so that the edit path is drafted within 4 tokens."""
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
    9); the answer rejoins the text at 3, so 7 8 -> 9 is learnt; after 3 the drafter drafts 4 5 9
    where plain lookup drafts 4 5 7, the typo again."""
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
    """An answer that drops tokens (7 8) learns no edit (a deletion would delete every later copy
    of them). An answer that adds a token and rejoins the text where it left it (no source tokens
    in between) learns none either, and the gap closes."""
    dropped = EditLookupDrafter()
    rounds(dropped, PROMPT, [1, 2, 3, 4, 5, 6])
    assert dropped.edits == {}
    inserted = EditLookupDrafter()
    context = PROMPT + [1, 2, 12, 7]  # 12 inserted before 7, which the answer then copies
    inserted.gap = (2, len(PROMPT) + 2)
    inserted.learn(context, 3, 1)  # [7] matches the source at 2: the copy starts at 3
    assert inserted.edits == {} and inserted.gap is None


def test_an_edit_the_answer_does_not_make_again_is_forgotten():
    """The answer left the copy at 7 8 and rejoined after them having written 7 8 itself: the edit
    7 8 -> 9 learnt before is dropped."""
    drafter = EditLookupDrafter()
    drafter.edits = {(7, 8): (9,)}
    context = PROMPT + [1, 2, 7, 8, 3]
    drafter.gap = (2, len(PROMPT) + 2)
    drafter.learn(context, 5, 1)  # [3] matches the source at 4
    assert drafter.edits == {} and drafter.gap is None


def test_a_gap_the_answer_never_rejoins_closes():
    """The answer writes more than `span` tokens of its own after leaving the copy: the gap
    closes without an edit (a later match far away must not pair with it)."""
    drafter = EditLookupDrafter(span=2)
    context = PROMPT + [1, 2, 12, 13, 14, 3]
    drafter.gap = (2, len(PROMPT) + 2)
    drafter.learn(context, 5, 1)
    assert drafter.edits == {} and drafter.gap is None


def test_the_longest_edit_wins_and_a_rejected_replacement_reopens_the_gap_at_its_source():
    """Edits 7 -> 5 and 7 8 -> 9: a copy through 7 8 drafts 9. If the target rejects that 9, the
    answer left the text at the source position of 7 (2)."""
    drafter = EditLookupDrafter()
    drafter.edits = {(7,): (5,), (7, 8): (9,)}
    context = PROMPT + [1, 2]
    tree = drafter.draft(context, 3)
    assert tree.tokens == [9, 3, 4]
    drafter.accept(context, tree, [], None, None)
    assert drafter.gap == (2, len(context))


def test_a_periodic_copy_records_positions_inside_the_context():
    """Context 3 4 3: the copy from position 1 runs past the end and repeats 4 3 (period 2); a
    draft rejected at its third token left the text at position 1, not 3."""
    drafter = EditLookupDrafter()
    tree = drafter.draft([3, 4, 3], 3)
    assert tree.tokens == [4, 3, 4]
    drafter.accept([3, 4, 3], tree, [0, 1], None, None)
    assert drafter.gap == (1, 5)


def test_another_drafters_tree_is_ignored():
    """Inside FallbackDrafter(X, edit lookup), accept may be told of X's tree: no error, no gap."""
    drafter = EditLookupDrafter()
    drafter.draft(PROMPT + [1], 3)  # its own draft: 2 7 8
    drafter.accept(PROMPT + [1], ms.Tree.chain([5, 5, 5, 5, 5]), [0], None, None)
    assert drafter.gap is None


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
    """Greedy equality on the shipped target, with edits learnt on the way (the edit path runs)."""
    target = ms.load_model("target")
    ids = ms.encode("teh cat sat on teh mat. the cat sat on the mat. teh dog")
    drafter = EditLookupDrafter()
    res = ms.speculative_generate(target, drafter, ids, 40, gamma=3)
    assert res.tokens == ms.generate(target, ids, 40).tokens
    assert drafter.edits


def test_options_are_checked():
    with pytest.raises(ValueError, match="max_n"):
        EditLookupDrafter(max_n=0)
    with pytest.raises(ValueError, match="span"):
        EditLookupDrafter(span=0)
    target = ms.load_model("target")
    assert isinstance(ms.load_drafter("edit_lookup", target, span=2), EditLookupDrafter)
    with pytest.raises(ValueError, match="takes no option"):
        ms.load_drafter("edit_lookup", target, window=3)
