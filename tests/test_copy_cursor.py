"""CopyCursorDrafter (minispec/methods/copy_cursor.py): its three rules on known answers, the cursor
following what the target kept, and its limits; the loop's exactness with it is checked beside the
other drafters (test_methods.py, test_llama.py, test_smollm2.py)."""
import pytest

import minispec as ms
from minispec.methods import CopyCursorDrafter


def test_a_2_or_3_gram_match_drafts_gamma_tokens_as_lookup_does():
    d = CopyCursorDrafter()
    for ctx in ([5, 6, 7, 8, 5, 6], [1, 2, 3, 9, 1, 2, 3, 4, 2, 3], [4, 4, 4, 4]):
        assert d.draft(ctx, 3).tokens == ms.PromptLookupDrafter(3, 2).match(ctx, 3)
    assert d.draft([5, 6, 7, 8, 5, 6], 3).tokens == [7, 8, 5]


def test_a_1_gram_match_drafts_one_token_and_no_match_drafts_none():
    d = CopyCursorDrafter()
    assert d.draft([1, 2, 3, 1], 3).tokens == [2]  # lookup would draft [2, 3, 1]
    assert ms.PromptLookupDrafter().match([1, 2, 3, 1], 3) == [2, 3, 1]
    assert d.draft([1, 2, 3, 4], 3).tokens == []
    assert d.draft([1, 2, 3, 1], 3, depth=0).tokens == []  # the loop wants no more tokens


def test_after_an_edit_the_cursor_finds_the_place_that_lookup_misses():
    """The source 10 11 12 13 14 15 16, then 30 14 31 elsewhere; the answer copies 10 11 12,
    replaces 13 by 99 and goes on with 14. Lookup's newest "14" is the one before 31; the
    cursor, just past the kept 12, finds the 14 of the source and drafts 15 16 30."""
    prompt = [10, 11, 12, 13, 14, 15, 16, 30, 14, 31, 7]
    d = CopyCursorDrafter(window=4)
    assert d.cursor is None
    ctx = prompt + [10, 11]
    assert d.draft(ctx, 3).tokens == [12, 13, 14]  # 2-gram "10 11": the source, gamma tokens
    d.accept(ctx, None, [0], None, None)  # kept 12, then the target wrote 99
    assert d.cursor == 3  # the next copied token is expected at prompt[3] (13)
    ctx = ctx + [12, 99]
    assert d.draft(ctx, 3).tokens == []  # "12 99" and "99" occur nowhere, 99 not near the cursor
    d.accept(ctx, None, [], None, None)  # the target wrote 14: the cursor stays
    ctx = ctx + [14]
    assert ms.PromptLookupDrafter().match(ctx, 3) == [31, 7, 10]  # lookup: the newest 14
    assert d.draft(ctx, 3).tokens == [15, 16, 30]  # the cursor: the 14 after the replaced 13
    d.accept(ctx, None, [0, 1], None, None)
    assert d.cursor == 7  # copied from prompt[5], two kept
    d.reset(None, None)
    assert d.cursor is None and d.source is None


def test_the_cursor_follows_every_draft_and_stays_when_nothing_is_drafted():
    """A rejected one-token guess moves the cursor too (the docstring's stated weakness); a round
    that drafts nothing (no match, or depth 0) leaves it; an empty context drafts nothing."""
    d = CopyCursorDrafter(window=1)
    ctx = [10, 11, 12, 13, 5, 14, 10, 11]
    assert d.draft(ctx, 3).tokens == [12, 13, 5]
    d.accept(ctx, None, [0], None, None)
    assert d.cursor == 3
    ctx = ctx + [12, 5]  # the answer writes 5, not at the cursor (13): rule 3 guesses 14
    assert d.draft(ctx, 3).tokens == [14]
    d.accept(ctx, None, [], None, None)
    assert d.cursor == 5  # moved to the rejected guess's place, away from 13
    assert d.draft(ctx + [7], 3, depth=0).tokens == []
    d.accept(ctx + [7], None, [], None, None)
    assert d.cursor == 5
    assert d.draft([], 3).tokens == []


def test_the_window_bounds_how_far_the_cursor_looks():
    prompt = [10, 11, 12, 13, 14, 15, 16, 30, 14, 31, 7]
    for window, expect in ((1, [31]), (2, [15, 16, 30])):  # 14 is the 2nd token past the cursor
        d = CopyCursorDrafter(window=window)
        ctx = prompt + [10, 11]
        d.draft(ctx, 3)
        d.accept(ctx, None, [0], None, None)
        d.draft(ctx + [12, 99], 3)
        d.accept(ctx + [12, 99], None, [], None, None)
        assert d.draft(ctx + [12, 99, 14], 3).tokens == expect  # else rule 3: one token


@pytest.mark.parametrize("kw,name", [({"window": 0}, "window"), ({"max_n": 1}, "max_n"),
                                     ({"window": 2.5}, "window")])
def test_bad_options_are_value_errors(kw, name):
    with pytest.raises(ValueError, match=name):
        CopyCursorDrafter(**kw)


def test_load_drafter_names_its_options(tiny_pair):
    target = tiny_pair[0]
    assert isinstance(ms.load_drafter("copy_cursor", target, window=3), CopyCursorDrafter)
    with pytest.raises(ValueError, match=r"takes no option 'min_n'"):
        ms.load_drafter("copy_cursor", target, min_n=2)
