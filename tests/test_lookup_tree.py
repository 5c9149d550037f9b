"""LookupTreeDrafter (minispec/methods/lookup_tree.py): its branches on known answers, the tree
they make, the budget, and its options; greedy equality and the exact law run in test_methods.py,
test_llama.py and test_smollm2.py."""
import pytest

import minispec as ms
from minispec.methods import LookupTreeDrafter


def test_branches_on_known_answers():
    """Context 5 6 7 | 5 6 8 | 5 6: the 2-gram "5 6" occurs twice, followed by 8 (newest) and 7;
    then the 1-gram "6", whose continuations repeat those; so two branches, newest first."""
    context = [5, 6, 7, 5, 6, 8, 5, 6]
    drafter = LookupTreeDrafter(branches=4, length=2)
    assert drafter.continuations(context, 2) == [[8, 5], [7, 5]]
    assert ms.PromptLookupDrafter().match(context, 2) == [8, 5]  # the first branch is lookup's
    tree = drafter.draft(context, 8)
    assert tree.tokens == [8, 5, 7, 5] and tree.parents == [-1, 0, -1, 2]


def test_shorter_ngrams_add_branches_after_longer_ones():
    """Context 1 2 3 | 9 3 4 | 2 3: "2 3" occurs once (followed by 9); the 1-gram "3" adds what
    followed its other occurrence (4) after it; branches=1 keeps lookup's only."""
    context = [1, 2, 3, 9, 3, 4, 2, 3]
    assert LookupTreeDrafter(length=1).continuations(context, 1) == [[9], [4]]
    assert LookupTreeDrafter(branches=1, length=3).continuations(context, 3) == [[9, 3, 4]]
    assert LookupTreeDrafter(min_n=2, length=1).continuations(context, 1) == [[9]]


def test_shared_prefixes_merge_and_the_budget_cuts_later_branches():
    """Two occurrences followed by 7 8 and 7 9 share the node 7; a budget of 3 nodes leaves the
    second branch only its shared first token and its own second one."""
    context = [4, 7, 9, 4, 7, 8, 4]
    drafter = LookupTreeDrafter(length=2)
    assert drafter.continuations(context, 2) == [[7, 8], [7, 9]]
    assert drafter.draft(context, 3).tokens == [7, 8, 9]
    assert drafter.draft(context, 2).tokens == [7, 8]
    assert drafter.draft(context, 8, depth=1).tokens == [7]  # one token left to generate


def test_a_repeating_tail_copies_periodically_and_no_match_drafts_nothing():
    assert LookupTreeDrafter(length=4).continuations([1, 2, 1, 2], 4)[0] == [1, 2, 1, 2]
    assert LookupTreeDrafter().draft([1, 2, 3], 8).tokens == []
    assert LookupTreeDrafter().draft([1], 8).tokens == []


def test_loop_keeps_the_branch_the_target_agrees_with():
    """On the shipped tiny target, greedy: the output is generate's, no round drafts more than
    gamma nodes, and some round keeps a draft that is not on the first branch (the tree's point)."""
    target = ms.load_model("target")
    ids = ms.encode("for i in range(10):\n    x = i\nfor j in range(10):\n    y = j\nfor ")
    res = ms.speculative_generate(target, LookupTreeDrafter(), ids, 40, gamma=8)
    assert res.tokens == ms.generate(target, ids, 40).tokens
    assert all(len(s.tree.tokens) <= 8 for s in res.steps)
    off_first = [s for s in res.steps if s.accepted and s.tree.parents.count(-1) > 1
                 and s.path and s.path[0] != 0]
    assert off_first


def test_options_are_checked():
    with pytest.raises(ValueError, match="min_n <= max_n"):
        LookupTreeDrafter(max_n=1, min_n=2)
    with pytest.raises(ValueError, match="branches"):
        LookupTreeDrafter(branches=0)
    target = ms.load_model("target")
    assert isinstance(ms.load_drafter("lookup_tree", target, length=3), LookupTreeDrafter)
    with pytest.raises(ValueError, match="takes no option"):
        ms.load_drafter("lookup_tree", target, window=3)
