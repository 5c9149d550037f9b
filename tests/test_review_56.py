"""A review of stop 56: theory's one-gamma answers given several alphas crashed inside torch
("Boolean value of Tensor with more than one value is ambiguous"); now a ValueError says that
they take one number. A tensor holding one number still works, as everywhere in theory."""
import pytest
import torch

import minispec as ms
from minispec.kit import theory


@pytest.mark.parametrize("call", [
    lambda a: theory.alpha_from_acceptance(a, 3),
    lambda a: theory.best_gamma(a, 0.1),
])
def test_several_alphas_where_one_is_meant_is_a_value_error(call):
    with pytest.raises(ValueError, match="must be a number"):
        call(torch.tensor([0.5, 0.6]))


def test_one_alpha_in_a_tensor_gives_what_the_number_gives():
    given = theory.alpha_from_acceptance(torch.tensor(0.5), 3)
    assert given == theory.alpha_from_acceptance(0.5, 3)
    assert theory.best_gamma(torch.tensor(0.8), 0.05) == theory.best_gamma(0.8, 0.05) == 8
    rate = sum(0.7 ** i for i in range(1, 4)) / 3  # the kept fraction alpha = 0.7 gives at gamma 3
    assert abs(theory.alpha_from_acceptance(rate, 3) - 0.7) < 1e-9


def test_edit_lookup_learns_only_from_rounds_it_drafted():
    """Inside a FallbackDrafter, a round lookup drafted could match the edit lookup's old plan
    (the same tokens): its accept then set a wrong gap, and a later round learnt an edit the
    answer never made (token 4 -> 0 1 2), which it drafted from then on."""
    from minispec.methods.edit_lookup import EditLookupDrafter
    from minispec.methods.fallback import FallbackDrafter
    edit = EditLookupDrafter()
    both = FallbackDrafter(ms.PromptLookupDrafter(min_n=2), edit)
    both.reset()
    context, answer = [0, 1, 1, 0, 1, 2, 1, 1, 0, 4], [3, 1, 1, 0, 1, 2, 3, 1, 2]
    used = []
    for _ in range(6):  # greedy verification against a scripted answer
        tree, at = both.draft(context, 3), len(context) - 10
        path = []
        while len(path) < len(tree.tokens) and tree.tokens[len(path)] == answer[at + len(path)]:
            path.append(len(path))
        both.accept(context, tree, path, None, None)
        used.append(both.used is both.first)
        context += tree.tokens[:len(path)] + [answer[at + len(path)]]
    assert any(used) and not all(used)  # both drafters drafted some rounds
    assert edit.edits == {}
    assert edit.draft([9, 4, 9, 4], 3).tokens == [9, 4, 9]  # a plain copy, no made-up edit


@pytest.mark.parametrize("kind", ["bytes", "int32"])
def test_data_functions_take_bytes_and_any_integer_ids(kind):
    """heldout_files() gives bytes, and a byte is its byte-level id: bits_per_byte and alignment
    raised a TypeError on them, and bits_per_byte a RuntimeError on int32 ids."""
    from minispec.kit import data
    text = data.heldout_files()[2][:700]
    given = text if kind == "bytes" else torch.tensor(list(text), dtype=torch.int32)
    draft, target = ms.load_model("draft"), ms.load_model("target")
    assert data.bits_per_byte(draft, given, 64, 2) == data.bits_per_byte(draft, list(text), 64, 2)
    assert data.alignment(target, draft, given, 64, 2) == data.alignment(target, draft, list(text),
                                                                        64, 2)


def test_data_refuses_what_is_not_token_ids():
    from minispec.kit import data
    draft = ms.load_model("draft")
    for bad in (torch.rand(700), torch.ones(2, 700, dtype=torch.long)):
        with pytest.raises(ValueError, match="data must be token ids"):
            data.bits_per_byte(draft, bad, 64, 2)


def test_batch_feed_names_the_cache_it_needs():
    from minispec.batch import feed
    draft = ms.load_model("draft")
    with pytest.raises(ValueError, match="RaggedCache"):
        feed(draft, draft.new_cache(), [[1, 2, 3]])


def test_a_gpt2_with_cross_attention_is_refused_by_name():
    transformers = pytest.importorskip("transformers")
    from minispec.bridge.hf import from_hf
    config = transformers.GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                     add_cross_attention=True)
    with pytest.raises(ValueError, match="add_cross_attention"):
        from_hf(transformers.GPT2LMHeadModel(config))


def test_a_list_of_numpy_prompts_is_a_batch():
    """It was read as one prompt whose token ids were arrays."""
    np = pytest.importorskip("numpy")
    target = ms.load_model("target")
    rows = ms.generate(target, [np.array([97, 98]), np.array([99])], 4)
    assert [r.tokens for r in rows] == [ms.generate(target, p, 4).tokens for p in ([97, 98], [99])]
