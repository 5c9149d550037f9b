"""Stop 60: a bug hunt of minispec.bridge, minispec.batch and minispec.kit (helpers), and the small
input checks left from stop 59 (a 0-d tensor of skipped blocks, bool laws, a dict of
probabilities, a batch of prompts where target_law takes one)."""
from collections import Counter

import pytest
import torch

import minispec as ms
from minispec.kit import checks, theory
from minispec.methods.layer_skip import check_skip


def test_check_skip_names_a_zero_d_tensor_and_takes_a_1_d_one():
    with pytest.raises(ValueError, match="collection of block indices"):
        check_skip(torch.tensor(2), 6)  # iterating it was a TypeError
    assert check_skip(torch.tensor([3, 2]), 6) == (2, 3)


def test_laws_of_bools_are_named_and_integer_laws_still_work():
    with pytest.raises(ValueError, match="not bools"):
        theory.tv_distance(torch.tensor([False, True]), torch.tensor([True, False]))
    assert float(theory.tv_distance(torch.tensor([0, 1]), torch.tensor([1, 0]))) == 1.0


def test_chi2_names_a_dict_of_probabilities():
    with pytest.raises(ValueError, match="one probability per cell"):
        checks.chi2_pvalue(Counter({0: 50, 1: 50}), {0: 0.5, 1: 0.5})
    assert checks.chi2_pvalue(Counter({0: 50, 1: 50}), [0.5, 0.5]) == 1.0


@pytest.mark.parametrize("prompt", [torch.tensor([[65, 66]]), [[65]], [(65, 66)]])
def test_target_law_names_a_batch_of_prompts(prompt):
    target = ms.load_model("target")
    with pytest.raises(ValueError, match="one sequence of token ids"):
        checks.target_law(target, prompt, 1)


def test_target_law_of_a_tensor_prompt_is_the_list_prompts():
    target = ms.load_model("target")
    law = checks.target_law(target, torch.tensor([65, 66]), 1)
    assert torch.equal(law, checks.target_law(target, [65, 66], 1))
    assert abs(float(law.sum()) - 1) < 1e-9


# --- minispec.kit, from the helper's bug hunt -------------------------------------------------

class Oracle(ms.Drafter):
    """Drafts the target's greedy answer, so a round can end at a kept eos."""

    def __init__(self, prompt, answer):
        self.n, self.answer = len(prompt), answer

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        return ms.Tree.chain(self.answer[len(context) - self.n:][:min(gamma, depth)])


def test_accept_hist_leaves_out_a_round_that_ended_at_a_kept_eos():
    import matplotlib
    matplotlib.use("Agg")
    from minispec.kit import viz
    target = ms.load_model("target")
    prompt = ms.encode("import os\nimport sys\n")
    answer = ms.generate(target, prompt, 40).tokens
    eos = answer[7]  # first seen there: round 1 keeps answer[:4] + a bonus, round 2 ends at it
    res = ms.speculative_generate(target, Oracle(prompt, answer), prompt, 40, gamma=4,
                                  eos_token=eos)
    assert eos not in answer[:7] and len(res.steps) == 2 and viz.ended_at_eos(res.steps[-1])
    assert res.steps[-1].accepted == 2  # answer[5:7]; the eos, its third draft, ends the decode
    ax = viz.plot_accept_hist(res).axes[0]
    heights = [b.get_height() for b in ax.containers[0]]
    assert heights == [0, 0, 0, 0, 1.0]  # round 1 kept all 4; the eos round (2 of 4) left out


def test_accept_hist_takes_gamma_4_0_and_names_several_alphas():
    import matplotlib
    matplotlib.use("Agg")
    from minispec.kit import viz
    res = ms.speculative_generate(ms.load_model("target"), ms.load_model("draft"),
                                  ms.encode("def f(x):"), 40, gamma=4, temperature=1.0, seed=1)
    assert viz.plot_accept_hist(res, gamma=4.0).axes[0].get_xticks().tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="gamma"):
        viz.plot_accept_hist(res, gamma="4")
    with pytest.raises(ValueError, match="one number"):
        viz.plot_accept_hist(res, alpha=torch.tensor([0.5, 0.6]))


def test_plot_pq_names_one_axes_and_takes_numpy_labels():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from minispec.kit import viz
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.2, 0.6])
    with pytest.raises(ValueError, match="two axes"):
        viz.image(viz.plot_pq, p, q)  # image's default: one axes
    with pytest.raises(ValueError, match="two axes"):
        viz.plot_pq(p, q, ax=plt.subplots()[1])
    fig = viz.plot_pq(p, q, labels=np.array(list("abc")))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["a", "b", "c"]
    plt.close("all")


def test_reliability_takes_integer_and_bool_labels_and_names_unequal_lengths():
    from minispec.kit.training import reliability
    rows = reliability([0.1, 0.5, 0.9], [0, 1, 1])
    assert [(r[2], r[4]) for r in rows] == [(1, 0.0), (1, 1.0), (1, 1.0)]
    assert reliability(torch.tensor([0.1, 0.9]), torch.tensor([False, True]))[1][4] == 1.0
    with pytest.raises(ValueError, match=r"\(N,\) each"):
        reliability([0.1, 0.5], [1.0])


def test_speedup_names_an_infinite_cost():
    with pytest.raises(ValueError, match="finite"):
        theory.speedup(0.8, 0, float("inf"))  # 0 * inf was a silent nan
    with pytest.raises(ValueError, match="finite"):
        theory.speedup(0.8, 2, 0.1, float("inf"))


def test_alignment_refuses_windows_it_cannot_spread():
    from minispec.kit import data
    target, draft = ms.load_model("target"), ms.load_model("draft")
    held = data.heldout()
    with pytest.raises(ValueError, match="too few for 32 windows"):
        data.alignment(target, draft, held[:266], windows=32)  # 32 copies of one window before
    assert data.alignment(target, draft, held[:288], windows=32) != data.alignment(
        target, draft, held[:256], windows=1)


def test_paper_takes_the_crop_prompt_its_message_suggests():
    from minispec.kit import paper
    target, draft = ms.load_model("target"), ms.load_model("draft")
    long = ms.encode("x" * 250)
    with pytest.raises(ValueError, match="crop_prompt=True"):
        paper.speculative_decoding(target, draft, long, 10, 4)
    out = paper.speculative_decoding(target, draft, long, 10, 4, crop_prompt=True)
    res = ms.speculative_generate(target, draft, long, 10, gamma=4, temperature=1.0,
                                  crop_prompt=True)
    assert out == res.tokens


def test_explorers_start_where_they_are_told_and_name_bad_starts():
    from minispec.kit import viz
    target, draft = ms.load_model("target"), ms.load_model("draft")
    w = viz.trace_explorer(target, draft, ["def "], max_new_tokens=4, gamma=16, temperature=3.0)
    assert [c.value for c in w.children[:2]] == [16, 3.0]  # clamped to 10 and 2.0 before
    with pytest.raises(ValueError, match="max_new_tokens"):
        viz.trace_explorer(target, draft, ["def "], max_new_tokens=0)
    with pytest.raises(ValueError, match="top"):
        viz.pq_explorer(target, draft, "def ", top=0)


# --- minispec.bridge, from the helper's bug hunt ----------------------------------------------

def small_llama(**kw):
    from minispec.bridge.llama import Llama, LlamaConfig
    torch.manual_seed(0)
    config = dict(vocab_size=32, block_size=32, n_layer=2, n_head=2, n_kv_head=1, n_embd=16,
                  n_hidden=32)
    return Llama(LlamaConfig(**{**config, **kw})).eval()


def test_packed_weights_follow_a_dtype_round_trip():
    """model.half().float() swaps W's data without a new version: the packed copy kept the
    unrounded weights, and Linear's sum was no longer nn.Linear's."""
    import torch.nn.functional as F
    m = small_llama()
    x = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        m(x)  # packs every weight
    m.half().float()
    lin, rows = m.h[0].mlp.up_proj, torch.randn(3, 16)
    with torch.inference_mode():
        torch.testing.assert_close(lin(rows), F.linear(rows, lin.weight))


@pytest.mark.parametrize("pos", [torch.arange(3).repeat(3, 1), [0, 1, 2], torch.tensor(0),
                                 torch.tensor([0.5, 1.5, 2.5]), torch.tensor([0, 1, 40])])
def test_llama_names_bad_positions(pos):
    with pytest.raises(ValueError, match="pos must be"):
        small_llama()(torch.tensor([[1, 2, 3]]), pos=pos)


def test_llama_names_a_mask_of_the_wrong_shape_and_a_cache_of_another_model():
    from minispec.bridge.llama import LlamaCache
    m, x = small_llama(), torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"\(T, S\) = \(3, 3\)"):
        m(x, mask=torch.ones(2, 2, dtype=torch.bool))
    cache = m.new_cache()
    m(x, cache)
    with pytest.raises(ValueError, match=r"\(T, S\) = \(3, 6\)"):  # (T, T) after cached entries
        m(x, cache, mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="another model"):
        m(x, small_llama(n_layer=3).new_cache())
    with pytest.raises(ValueError, match="another model or dtype"):
        m.double()(x, LlamaCache(m.config, dtype=torch.float32))


def test_llama_names_token_ids_embedding_cannot_take_and_keeps_int32():
    m, x = small_llama(), torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="token ids"):
        m(x.to(torch.uint8))
    torch.testing.assert_close(m(x.int()), m(x))


@pytest.mark.parametrize("kw", [dict(batch_size=0.5), dict(batch_size=None), dict(batch_size="2"),
                                dict(batch_size=-1), dict(size=2.5), dict(size=-1), dict(size=0)])
def test_llama_new_cache_names_its_bad_arguments(kw):
    with pytest.raises(ValueError, match="must be an integer"):
        small_llama().new_cache(**kw)


def test_llama_new_cache_takes_whole_floats():
    m = small_llama()
    cache = m.new_cache(batch_size=2.0, size=24.0)
    m(torch.tensor([[1, 2, 3], [4, 5, 6]]), cache)
    assert (cache.k.shape[1], cache.size, cache.length) == (2, 24, 3)


# --- minispec.batch, from the helper's bug hunt -----------------------------------------------

def test_ragged_keep_refuses_rows_of_different_lengths_before_moving_anything():
    from minispec.batch import RaggedCache, feed
    target = ms.load_model("target")
    cache = RaggedCache(target.config, 2)
    feed(target, cache, [[1, 2, 3], [4]])
    before = cache.k.clone()
    with pytest.raises(ValueError, match="lengths \\[3, 1\\]"):
        cache.keep(0, [2])  # row 1 has no entry 2: it would have kept padding
    assert torch.equal(cache.k, before) and cache.lengths == [3, 1]


def test_ragged_keep_of_rows_alike_keeps_the_path_in_every_row():
    from minispec.batch import RaggedCache, feed
    target = ms.load_model("target")
    cache = RaggedCache(target.config, 2)
    feed(target, cache, [[1, 2, 3], [4, 5, 6]])
    cache.keep(1, [1])  # entry 2 moves to 1 in both rows
    assert cache.lengths == [2, 2]
    logits = feed(target, cache, [[7], [8]])[1][:, 0]
    for row, seq, new in zip(logits, [[1, 2, 3], [4, 5, 6]], [7, 8]):  # each row alone
        alone = target.new_cache()
        target(torch.tensor([seq]), alone)
        alone.keep(1, [1])
        torch.testing.assert_close(row, target(torch.tensor([[new]]), alone)[0, -1])


def test_a_fallback_subclass_that_drafts_its_own_way_drafts_alone():
    class OneToken(ms.FallbackDrafter):
        def draft(self, context, gamma, *args, **kw):
            tree = super().draft(context, gamma, *args, **kw)
            return ms.Tree.chain(tree.tokens[:1]) if tree.tokens else tree
    target = ms.load_model("target")
    drafter = OneToken(ms.PromptLookupDrafter(), ms.ModelDrafter(ms.load_model("draft")))
    with pytest.raises(ValueError, match="one prompt at a time"):
        ms.speculative_generate(target, drafter, [ms.encode("ab"), ms.encode("abc")], 8)


def test_a_batch_row_of_two_rows_is_named_and_a_1_by_t_row_is_one_prompt():
    target = ms.load_model("target")
    with pytest.raises(ValueError, match="one sequence"):
        ms.generate(target, [torch.tensor([[97, 98], [99, 100]]), [99]], 4)
    out = ms.generate(target, [torch.tensor([[97, 98]]), [99]], 4)
    assert out[0].tokens == ms.generate(target, [97, 98], 4).tokens


@pytest.mark.parametrize("rows", [[b"ab", [99]], [b"ab", b"c"], [range(97, 99), range(99, 100)]])
def test_any_row_says_a_list_is_a_batch(rows):
    target = ms.load_model("target")
    out = ms.generate(target, rows, 4)
    assert [r.tokens for r in out] == [ms.generate(target, list(r), 4).tokens for r in rows]


def test_ragged_helpers_name_bad_input():
    from minispec.batch import RaggedCache, causal_mask, feed
    target = ms.load_model("target")
    cache = RaggedCache(target.config, 2)
    feed(target, cache, [[1, 2], [3, 4]])
    cache.crop(torch.tensor(1))  # a 0-d tensor is one length for every row
    assert cache.lengths == [1, 1]
    assert torch.equal(causal_mask(torch.tensor([2, 0]), torch.tensor([1, 2]), 2),
                       causal_mask([2, 0], [1, 2], 2))
    for args in [([2, 0], [-1, 2], 2), ([-2, 0], [1, 2], 2), ([2, 0], [1, 2], 2.5),
                 ([2, 0], [1, 2], None)]:
        with pytest.raises(ValueError):
            causal_mask(*args)
    with pytest.raises(ValueError, match="at least one"):
        feed(target, RaggedCache(target.config, 0), [])
    with pytest.raises(ValueError, match="rows of token ids"):
        feed(target, RaggedCache(target.config, 2), [5, [3]])
    with pytest.raises(ValueError, match="size"):
        RaggedCache(target.config, 2, -1)


# --- the "transposed" kernel: x @ W^T with W^T stored (issue 28's honest baseline) -------------

def test_transposed_kernel_follows_w_and_the_kernel_switches():
    import torch.nn.functional as F
    from minispec.bridge.linear import Linear, kernel
    torch.manual_seed(0)
    lin, x = Linear(5, 7), torch.randn(3, 5)
    with torch.no_grad():
        for name in ("transposed", "packed", "transposed"):  # each switch lays W out again
            with kernel(name):
                torch.testing.assert_close(lin(x), F.linear(x, lin.weight))
        with kernel("transposed"):
            lin.weight.mul_(2)  # written in place: a new version
            torch.testing.assert_close(lin(x), F.linear(x, lin.weight))
            assert lin._packed.shape == (5, 7) and lin._packed.is_contiguous()
            lin.weight = torch.nn.Parameter(torch.randn(7, 5))  # replaced
            torch.testing.assert_close(lin(x), F.linear(x, lin.weight))
    lin.double()
    with torch.no_grad(), kernel("transposed"):  # any dtype: float64 too
        torch.testing.assert_close(lin(x.double()), F.linear(x.double(), lin.weight))


def test_speculation_equals_greedy_under_the_transposed_kernel():
    from minispec.bridge.linear import kernel
    m = small_llama(vocab_size=64, block_size=64)
    ids = [3, 9, 4, 3, 9, 4, 3, 9]
    with kernel("transposed"):
        want = ms.generate(m, ids, 24).tokens
        for drafter in (ms.load_drafter("lookup", m), ms.Lookahead(m)):
            got = ms.speculative_generate(m, drafter, ids, 24, gamma=3)
            assert got.tokens == want, drafter
