"""Stop 71's review of the kit. Each test below failed on the code before its fix: Algorithm 1's
reference (kit/paper.py) cropped a prompt to nothing and failed inside the embedding; the
explorers clamped a temperature of -1 to a greedy slider, truncated a seed of 2.7 and built a
widget whose every redraw failed (max_new_tokens past the block); plot_pq drew p under the title
"norm(max(0, p - q))" when p == q, and named a batch of rows in a torch message; byte_label drew a
space as a blank box and every byte from 128 up as the same '?'; the traces drew an empty picture
of a plain generate; their legends listed "rejected" when rejected drafts were hidden, and
overlapped at narrow widths; repeated_share read text as int("a")."""
import matplotlib
import pytest
import torch

import minispec as ms
from minispec.kit import data, viz
from minispec.kit.paper import speculative_decoding

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def pair():
    return ms.load_model("target"), ms.load_model("draft")


def test_algorithm_1_names_max_new_tokens_past_the_block(pair):
    target, draft = pair
    ids = ms.encode("def fib(n):\n    ")
    for n in (256, 261):  # the cropped prompt would be empty
        with pytest.raises(ValueError, match="max_new_tokens .*block_size=256"):
            speculative_decoding(target, draft, ids, n, 4, crop_prompt=True)
    assert len(speculative_decoding(target, draft, ids, 255, 4, crop_prompt=True)) == 255


@pytest.mark.parametrize("bad, match", [(dict(temperature=-1), "temperature"),
                                        (dict(temperature=float("nan")), "temperature"),
                                        (dict(seed=2.7), "seed"),
                                        (dict(max_new_tokens=300), "max_new_tokens")])
def test_trace_explorer_refuses_what_its_controls_would_change(pair, bad, match):
    with pytest.raises(ValueError, match=match):
        viz.trace_explorer(*pair, ["def "], **bad)


def test_pq_explorer_refuses_a_negative_temperature(pair):
    with pytest.raises(ValueError, match="temperature"):
        viz.pq_explorer(*pair, "def ", temperature=-1)


def test_plot_pq_draws_no_residual_where_p_equals_q():
    p = torch.tensor([.5, .3, .2])
    fig = viz.plot_pq(p, p.clone(), labels="abc")
    assert fig.axes[1].get_title().startswith("no residual") and not fig.axes[1].patches
    fig = viz.plot_pq(p, torch.tensor([.2, .2, .6]), labels="abc")  # a residual: drawn
    assert [round(b.get_height(), 6) for b in fig.axes[1].patches] == [0.75, 0.25, 0.0]


def test_plot_pq_names_a_batch_of_rows():
    p, q = torch.tensor([.5, .3, .2]), torch.tensor([.2, .2, .6])
    with pytest.raises(ValueError, match="one p and one q"):
        viz.plot_pq(torch.stack([p, p]), torch.stack([q, q]))


def test_byte_label_shows_a_space_and_tells_high_bytes_apart():
    labels = [viz.byte_label(b) for b in (97, 10, 0, 32, 128, 195, 255)]
    assert labels == ["a", "\\n", "\\x00", "␣", "\\x80", "\\xc3", "\\xff"]
    with pytest.raises(ValueError, match="byte"):
        viz.byte_label(256)


def test_the_traces_refuse_a_decode_without_rounds(pair):
    plain = ms.generate(pair[0], ms.encode("def "), 5)
    for show in (viz.ansi_trace, viz.html_trace, viz.plot_trace, viz.plot_acceptance):
        with pytest.raises(ValueError, match="no rounds"):
            show(plain)


def test_the_legends_follow_show_rejected_and_do_not_overlap(pair):
    res = ms.speculative_generate(*pair, ms.encode("def "), 24, gamma=4, temperature=1.0)
    assert any(len(s.tree.tokens) > s.accepted for s in res.steps)  # a draft was rejected
    assert 'title="rejected"' not in viz.html_trace(res, show_rejected=False)
    assert 'title="rejected"' in viz.html_trace(res, show_rejected=True)
    for shown in (True, False):
        ax = viz.plot_trace(res, show_rejected=shown, width=30).axes[0]
        legend = [t for t in ax.texts if t.get_text().startswith("■ ")]
        assert [t.get_text()[2:] for t in legend] == [k for k in viz.COLORS
                                                      if shown or k != "rejected"]
        x = [t.get_position()[0] for t in legend]
        assert all(b - a >= len(t.get_text()) for a, b, t in zip(x, x[1:], legend))


def test_repeated_share_names_text():
    with pytest.raises(ValueError, match="encode"):
        data.repeated_share(ms.encode("abc"), "abc")
    assert data.repeated_share([1, 2, 3, 4], [1, 2, 3, 4]) == 0.25


# The same review, of the bridge: smollm2's cache, and llama.Linear's packed copy of W.

def test_keep_skips_a_cache_torch_save_cannot_write(tmp_path):
    """torch.save reports a full disk or a read-only folder as a RuntimeError, which load() let
    escape (the model never loaded) and whose half-written temporary file it left behind."""
    from minispec.bridge import smollm2

    def save(tmp):
        tmp.write_bytes(b"half a file")
        raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos")
    target = tmp_path / "cache" / "llama.pt"
    assert smollm2.keep(target, save) is None
    assert list((tmp_path / "cache").iterdir()) == []  # no file, and no temporary one
    smollm2.keep(target, lambda tmp: torch.save({"w": 1}, tmp))  # a cache that can be written
    assert torch.load(target) == {"w": 1}


@pytest.mark.parametrize("name", ["packed", "transposed"])
def test_the_packed_copy_follows_new_data_given_to_w(name):
    """W.data = ... (and vector_to_parameters, which does the same) kept the Parameter and its
    version: the old packed copy went on computing the old product, silently."""
    from minispec.bridge.linear import Linear, kernel
    torch.manual_seed(0)
    lin, x = Linear(64, 128).eval(), torch.randn(3, 64)
    with torch.no_grad(), kernel(name):
        lin(x)  # packs W
        new = torch.randn(128, 64)
        lin.weight.data = new
        after = lin(x)
        torch.nn.utils.vector_to_parameters(torch.randn(128 * 64), lin.parameters())
        last = lin(x)
    assert torch.allclose(after, x @ new.t(), atol=1e-5)
    assert torch.allclose(last, x @ lin.weight.t(), atol=1e-5)
    assert not torch.allclose(last, after, atol=1e-2)


@pytest.mark.parametrize("name", ["packed", "torch", "transposed", "columns"])
def test_linear_names_an_input_of_the_wrong_width(name):
    """The packed kernel failed inside oneDNN ("could not create a primitive descriptor"), the
    others with torch's own message: each kernel its own error for one mistake."""
    from minispec.bridge.linear import Linear, kernel
    with torch.inference_mode(), kernel(name), pytest.raises(ValueError, match=r"\(\.\.\., 64\)"):
        Linear(64, 128)(torch.randn(2, 63))


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_feed_names_positions_past_the_block(kind):
    """batch.feed let a Llama run on at positions past its block_size (a GPT failed inside its
    position table, an IndexError): both get a ValueError naming the position."""
    from minispec.batch.loop import new_cache
    from minispec.batch.ragged import feed
    from minispec.bridge.llama import Llama, LlamaConfig
    torch.manual_seed(0)
    model = (ms.GPT(ms.GPTConfig(vocab_size=5, block_size=8, n_layer=1, n_head=2, n_embd=8))
             if kind == "gpt" else
             Llama(LlamaConfig(vocab_size=5, block_size=8, n_layer=1, n_head=2, n_kv_head=1,
                               n_embd=8, n_hidden=16))).eval()
    cache = new_cache(model, 2, size=16)  # room for 16 entries, positions for 8
    with torch.inference_mode():
        feed(model, cache, [[1] * 8, [2] * 3])  # positions 0..7: fits
        with pytest.raises(ValueError, match="position 8: the model's positions end at"):
            feed(model, cache, [[1], []])
        feed(model, cache, [[], [3] * 5])  # the other row still has room: 3..7


def test_probs_warps_in_hugging_faces_order_known_answers():
    """A review of the tests: every exact law at T != 1 with top-p builds its expected side with
    probs itself, so probs applying top-p before the temperature passed them all. Hand-worked
    answers (temperature, then top-k, then top-p, each on what the step before left):"""
    p = torch.tensor([.5, .3, .15, .05])
    # T = 0.5: p^2 / sum = (.25, .09, .0225, .0025) / .365; top-p 0.9 keeps the first two (their
    # mass before the third is .9315): 25/34, 9/34. Top-p first would keep three: (.6897, ...).
    want = torch.tensor([25 / 34, 9 / 34, 0, 0])
    for order in ([0, 1, 2, 3], [2, 0, 3, 1]):  # a shuffled vocabulary: the same law, moved
        got = ms.probs(p[order].log(), temperature=0.5, top_p=0.9)
        assert torch.allclose(got, want[order], atol=1e-6)
    # top-k 2 first leaves (.4, .3) / .7 = (.571, .429); top-p 0.5 then keeps the first alone.
    # Top-p first would keep .4 and .3 (0.4 < 0.5), and top-k then both: (.571, .429).
    got = ms.probs(torch.tensor([.4, .3, .2, .1]).log(), top_k=2, top_p=0.5)
    assert torch.equal(got, torch.tensor([1.0, 0, 0, 0]))


def test_the_rules_take_an_integer_one_hot_p():
    """F.one_hot returns integers: the rules passed them to torch.multinomial, which refused them
    (a RuntimeError about dtypes) the first time a token was drawn from p."""
    import torch.nn.functional as F
    p = F.one_hot(torch.tensor([2, 0, 1]), 3)  # (3, 3) int64: the target is certain each time
    q = torch.full((2, 3), 1 / 3)
    g = torch.Generator().manual_seed(0)
    assert ms.speculative_accept([2, 1], q, p, g) == (1, 0)  # 2 kept (p = 1), 1 rejected: 0
    assert ms.multi_draft_accept([1], q[0], p[0], g) == 2  # rejected (p = 0): the residual's 2
    tree = ms.Tree.chain([2, 0], [q[0], q[1]])
    assert ms.verify_tree(tree, p, temperature=1.0, generator=g) == ([0, 1], 1)  # the bonus: 1
    assert ms.sample(p[2]) == 1 and ms.sample([0, 0, 1]) == 2
