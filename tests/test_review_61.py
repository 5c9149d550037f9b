"""Stop 61: the core's bad input left from stop 60, fixed with the room of load_model, which moved
from model.py to the registry of shipped things (minispec.methods.registry). Each test below failed
on the code before its fix, silently or from inside."""
import pytest
import torch

import minispec as ms
from minispec.adaptive import as_policy
from minispec.tree import Tree, tree_mask


def tiny_gpt(seed=0):
    torch.manual_seed(seed)
    return ms.GPT(ms.GPTConfig(vocab_size=5, block_size=16, n_layer=1, n_head=1, n_embd=8)).eval()


def test_load_model_lives_in_the_registry_and_every_old_import_works():
    from minispec.methods import load_model as from_methods
    from minispec.methods.registry import load_model as from_registry
    from minispec.model import load_model as from_model  # the old import path still works
    assert from_model is from_methods is from_registry is ms.load_model
    assert ms.load_model("draft").config.n_layer == 1
    with pytest.raises(ValueError, match="unknown model"):
        ms.load_model("nope")


@pytest.mark.parametrize("replacement", ["False", 0, None])
def test_multi_draft_accept_takes_only_a_bool_replacement(replacement):
    p, q = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="replacement must be True or False"):
        ms.multi_draft_accept([2, 1], q, p, replacement=replacement)  # "False" read as True
    assert ms.multi_draft_accept([2, 1], q, p, torch.Generator().manual_seed(0),
                                 replacement=False) in (0, 1)


def test_a_tree_written_by_hand_is_walked_as_one_built_by_add():
    p = torch.eye(3)[[2, 1, 0]]  # argmax after the root 2, after node 0 1, after node 1 0
    by_hand = Tree(tokens=[2, 1], parents=[-1, 0])
    assert by_hand.children(-1) == {2: 0} and by_hand.children(0) == {1: 1}
    assert ms.verify_tree(by_hand, p) == ([0, 1], 0)  # it kept nothing: no children indexed
    assert by_hand.scores == [1.0, 1.0] and by_hand.depths().tolist() == [1, 2]
    branched = Tree(tokens=[0, 2, 1], parents=[-1, -1, 1], scores=[0.2, 0.7, 0.5])
    assert branched.children(-1) == {0: 0, 2: 1} and branched.score(2) == 0.5


def test_a_tree_with_a_bad_parent_is_named():
    with pytest.raises(ValueError, match="a parent"):
        Tree(tokens=[1, 2], parents=[-1, 1])  # node 1 its own parent
    with pytest.raises(ValueError, match="a parent"):
        Tree().add(3, 1)  # no node 3
    with pytest.raises(ValueError):
        Tree(tokens=[1, 2], parents=[-1])  # a token without a parent


@pytest.mark.parametrize("parents", [[-1, 2, 0], [-1, -3], [-1, 0.5]])
def test_tree_mask_names_a_parent_that_is_not_earlier(parents):
    with pytest.raises(ValueError, match="parent"):
        tree_mask(parents, 2)  # [-1, 2, 0] read node 2's row before it was made
    assert tree_mask([-1, -1, 0], 2)[-1].tolist() == [True, True, True, False, True]


def test_from_paths_size_must_be_whole():
    with pytest.raises(ValueError, match="size"):
        Tree.from_paths([[1, 2, 3]], size=2.5)  # never equal to a length: no cap at all
    assert Tree.from_paths([[1, 2, 3]], size=2).tokens == [1, 2]


def test_score_temperature_without_a_tree_is_named():
    draft = ms.load_model("draft")
    with pytest.raises(ValueError, match="need branching"):
        ms.ModelDrafter(draft, score_temperature=0.5)  # a chain has no path probabilities
    assert ms.ModelDrafter(draft, branching=(2,), score_temperature=0.5).score_temperature == 0.5


def test_the_gpt_names_a_float_mask_and_a_mask_of_the_wrong_shape():
    model, idx = tiny_gpt(), torch.tensor([[1, 2, 3]])
    causal = torch.ones(3, 3).tril()
    with pytest.raises(ValueError, match="bool tensor"):
        model(idx, mask=causal)  # a float mask: SDPA ADDS it (0 and 1): attention to all
    with pytest.raises(ValueError, match=r"\(T, S\) = \(3, 3\)"):
        model(idx, mask=torch.ones(3, 4, dtype=torch.bool))
    assert torch.allclose(model(idx, mask=causal.bool()), model(idx), atol=1e-6)


def test_a_policy_without_reset_is_named():
    class NoReset:
        gamma = 3

        def update(self, step):
            pass
    with pytest.raises(ValueError, match=r"gamma \(draft length\) must be an integer"):
        as_policy(NoReset())  # not a policy (no reset): read as a number, which it is not
    with pytest.raises(ValueError, match="gamma"):
        ms.speculative_generate(tiny_gpt(), ms.PromptLookupDrafter(), [1, 2, 1], 4,
                                gamma=NoReset())  # an AttributeError at policy.reset()
