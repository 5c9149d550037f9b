"""The bugs a review of the restructured package found (issue 21, item 6): each test failed on
main cd0e268 and passes now. (model.double() after load_drafter: tests/test_methods.py.)"""
import numpy as np
import pytest
import torch

import minispec as ms
from minispec.methods import EagleDrafter, load_eagle
from minispec.tree import grow_tree

IDS = ms.encode("    def __init__(self, x):\n        self.")


@pytest.fixture(scope="module")
def target():
    return ms.load_model("target")


@pytest.mark.parametrize("seed", range(4))
def test_a_sampled_tree_makes_one_draft_call_per_depth_it_fills(seed):
    """At T > 0 sampled children are never pruned, so once the tree holds gamma nodes no deeper
    expansion can add one: the old grow_tree still ran the draft once more (3 calls for the
    depth-2 tree of the review's example, seed 0)."""
    d = ms.ModelDrafter(ms.load_model("draft"), branching=(4, 2, 2, 1))
    d.reset()
    passes = []
    d.model.h[0].register_forward_hook(lambda *args: passes.append(1))
    tree, calls = grow_tree(d.expand, IDS, 6, d.branching, temperature=1.0,
                            generator=torch.Generator().manual_seed(seed))
    depth = int(tree.depths().max())
    assert len(tree.tokens) == 6 and calls == len(passes) == depth


def test_whole_numbers_are_accepted_as_integers_and_the_rest_named(target):
    five = ms.generate(target, IDS, 5).tokens
    assert ms.generate(target, IDS, 5.0).tokens == five
    assert ms.generate(target, IDS, np.int64(5)).tokens == five
    sampled = ms.generate(target, IDS, 5, temperature=1.0, top_k=5).tokens
    assert ms.generate(target, IDS, 5, temperature=1.0, top_k=5.0).tokens == sampled
    draft = ms.load_model("draft")
    res = ms.speculative_generate(target, draft, IDS, 5, gamma=np.int64(4))
    assert res.tokens == five and ms.Fixed(4.0).gamma == 4
    for kwargs, name in [(dict(max_new_tokens=5.5), "max_new_tokens"), (dict(top_k=2.5), "top_k"),
                         (dict(gamma=4.5), "gamma"), (dict(gamma=True), "gamma"),
                         (dict(max_new_tokens="5"), "max_new_tokens")]:
        with pytest.raises(ValueError, match=name):
            ms.speculative_generate(target, draft, IDS, **{"max_new_tokens": 5, **kwargs})


def test_a_tree_built_with_add_alone_is_verified_as_deterministic_guesses():
    """No q recorded (Tree.add, no cands / q): the guess is kept when x ~ p equals it, so the
    kept path's first node has probability p_root(guess) (the old verify_tree: KeyError -1)."""
    tree = ms.Tree()
    tree.add(tree.add(-1, 3), 1)  # guesses 3, then 1
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.0, 0.0], [0.25] * 4])
    g, n, kept = torch.Generator().manual_seed(0), 4000, 0
    for _ in range(n):
        path, token = ms.verify_tree(tree, p, temperature=1.0, generator=g)
        kept += path[:1] == [0]
    assert abs(kept / n - 0.4) < 5 * (0.4 * 0.6 / n) ** 0.5


def test_a_round_that_drafted_nothing_has_no_bonus():
    assert not ms.Step(ms.Tree(), [], 7).bonus  # a plain token, not a free extra
    chain = ms.Tree.chain([1, 2])
    assert ms.Step(chain, [0, 1], 7).bonus and not ms.Step(chain, [0], 7).bonus


def test_load_drafter_names_an_unknown_option_and_keeps_other_type_errors(target, monkeypatch):
    with pytest.raises(ValueError, match="ModelDrafter takes no option 'gama'"):
        ms.load_drafter("draft", target, gama=4)
    with pytest.raises(ValueError, match="HeadDrafter takes no option 'k'"):
        ms.load_drafter("hydra", target, k=2)

    def broken(self, model, threshold=None, branching=None, width=None, score_temperature=1.0):
        raise TypeError("a bug inside the constructor")
    monkeypatch.setattr(ms.ModelDrafter, "__init__", broken)
    with pytest.raises(TypeError, match="a bug inside the constructor"):  # not "no option"
        ms.load_drafter("draft", target, threshold=0.5)


def test_options_a_drafter_would_ignore_are_refused(target):
    draft = ms.load_model("draft")
    with pytest.raises(ValueError, match="threshold"):
        ms.ModelDrafter(draft, threshold=0.5, branching=(2, 2))
    with pytest.raises(ValueError, match="width"):
        ms.ModelDrafter(draft, width=2)
    with pytest.raises(ValueError, match="width"):
        EagleDrafter(load_eagle(target), width=2)
    ms.ModelDrafter(draft, branching=(2, 2), width=2)  # a dynamic tree: both together are fine
