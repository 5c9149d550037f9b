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


# The methods (a helper's bug hunt of beam, streaming, layer skip, learned stop, lookahead, the
# heads, EAGLE and the registry: no wrong result in the loop; these are direct calls and input).

IDS = ms.encode("def foo(x):\n    return x")


def test_learned_stop_reads_its_draft_arguments_as_every_drafter_does():
    target = ms.load_model("target")
    stop = ms.load_drafter("learned_stop", target, threshold=1.0)  # never stops early
    assert len(stop.draft(torch.tensor(IDS), 3).tokens) == len(stop.draft(IDS, 3).tokens) == 3
    for gamma, depth, match in ((2.5, None, "gamma"), (-1, None, "gamma"), (4, 1.5, "depth")):
        with pytest.raises(ValueError, match=match):
            stop.draft(IDS, gamma, depth=depth)  # 2.5 drafted 3; -1 nothing, silently
    with pytest.raises(ValueError, match="context"):
        stop.draft(None, 2)
    with pytest.raises(ValueError, match="at least one token"):
        stop.draft([], 2)


def drafted_twice(drafter, model, prompt):
    """The drafter's tokens for one context, drafted twice before the loop's accept."""
    res = ms.speculative_generate(model, drafter, prompt, 8, gamma=3)
    held = drafter.fed if hasattr(drafter, "fed") else drafter.seen  # what its features cover
    context = held + [res.steps[-1].token]  # the context of the round after the last one
    return drafter.draft(context, 3).tokens, drafter.draft(context, 3).tokens


def test_eagle_drafts_the_same_tree_when_asked_twice_before_accept():
    from test_eagle_llama import random_head
    from test_llama import random_llama
    target = ms.load_model("target")
    first, again = drafted_twice(ms.load_drafter("eagle", target), target, IDS)
    assert first == again and len(first) == 3  # the second call fed the head nothing: a crash
    llama = random_llama(vocab_size=16, n_embd=16, n_head=4, n_kv_head=2, seed=2, block_size=64)
    from minispec.methods.eagle_llama import EagleLlamaDrafter
    drafter = EagleLlamaDrafter(random_head(llama, list(range(0, 16, 2))))
    first, again = drafted_twice(drafter, llama, [3, 5, 7, 3, 5, 1, 2, 9, 4, 4, 6])
    assert first == again and len(first) == 3


def test_head_constructors_check_their_model_and_options():
    from minispec.methods import EagleHead, MedusaHeads
    from minispec.methods.eagle_llama import EagleLlamaHead
    from test_llama import random_llama
    target = ms.load_model("target")
    for make in (lambda: MedusaHeads(None), lambda: EagleHead("target"),
                 lambda: EagleLlamaHead(None, [0, 1]), lambda: EagleLlamaHead(target, [0, 1])):
        with pytest.raises(ValueError, match="model|target"):
            make()  # AttributeErrors from inside
    with pytest.raises(ValueError, match="sequential must be True or False"):
        MedusaHeads(target, 2, sequential="no")  # read as True: Hydra's heads
    llama = random_llama(vocab_size=16, n_embd=16, n_head=4, n_kv_head=2, seed=2, block_size=64)
    for keep in ([1.9, 0], [True, False]):
        with pytest.raises(ValueError, match="keep must be integer token ids"):
            EagleLlamaHead(llama, keep, (0, 1))  # 1.9 became token 1
    assert EagleLlamaHead(llama, [1, 0], (0, 1)).keep.tolist() == [1, 0]


def test_layer_skip_reads_ids_as_a_drafter_does():
    from minispec.methods.layer_skip import agreement
    target = ms.load_model("target")
    assert agreement(target, torch.tensor(IDS), [(2, 3)]) == agreement(target, IDS, [(2, 3)])
    for ids in (None, [1.5, 2], "def"):
        with pytest.raises(ValueError, match="context|token"):
            agreement(target, ids, [(2, 3)])


def test_load_model_names_a_file_that_is_no_gpt(tmp_path):
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    (tmp_path / "text.pt").write_text("not torch")
    torch.save(ms.load_model("draft").state_dict(), tmp_path / "bare.pt")
    for name in ("tensor.pt", "text.pt"):
        with pytest.raises(ValueError, match="is not a GPT's weights file"):
            ms.load_model(tmp_path / name)  # RuntimeError, UnpicklingError from inside torch
    with pytest.raises(ValueError, match=r"bare.pt is not a GPT \(a dict of its config"):
        ms.load_model(tmp_path / "bare.pt")


def test_drafters_name_bad_token_ids_and_an_empty_context():
    target = ms.load_model("target")
    beam = ms.load_drafter("beam", target)
    with pytest.raises(ValueError, match="each context token id"):
        beam.draft([1, 2.5], 2)  # a RuntimeError from the embedding
    with pytest.raises(ValueError, match="each context token id"):
        ms.load_drafter("lookup_tree", target).draft([1, -1, 1], 2)
    with pytest.raises(ValueError, match="at least one token"):
        beam.draft([], 2)  # "crop's n ... got -1"
    stream = ms.load_drafter("streaming", target)
    ms.speculative_generate(target, stream, IDS, 4, gamma=2)  # its target cache is filled
    with pytest.raises(ValueError, match="at least one token"):
        stream.draft([], 2)
    assert beam.draft(IDS, 2).tokens == beam.draft(torch.tensor(IDS), 2).tokens


def test_lookahead_checks_its_model_and_resets_without_arguments():
    with pytest.raises(ValueError, match="model must be a GPT or a Llama"):
        ms.Lookahead(None)  # accepted, never used
    drafter = ms.Lookahead(ms.load_model("target"))
    drafter.reset()  # a TypeError: the protocol's reset has defaults
    assert drafter.draft([1, 2, 3], 2).tokens == [3, 3]
