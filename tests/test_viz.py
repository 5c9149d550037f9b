"""minispec.kit.viz (ms.viz): traces say exactly what happened in each round, plots draw exactly
the math.

Every check reads numbers back out of the figure (bar heights, titles) and compares them with the
quantities they are meant to show, so a plot that mislabels or misstacks its bars fails. No test
writes a file (each runs in an empty working directory, checked afterwards).
"""
import matplotlib
import pytest
import torch

import minispec as ms
from minispec import viz
from minispec.kit.viz import drafted

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def _no_files_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    yield
    plt.close("all")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def sampled(byte_pair):
    """A speculative run at temperature 1 on the random pair: rounds with 0..gamma drafts kept."""
    target, draft = byte_pair
    return ms.speculative_generate(target, draft, ms.encode("def f(x):"), max_new_tokens=40,
                                   gamma=4, temperature=1.0, seed=3)


def test_trace_segments_rebuild_the_output(sampled):
    segs = viz.trace_segments(sampled.steps, show_rejected=False)  # one segment per emitted token
    assert len(segs) == len(sampled.tokens)
    assert "".join(t for t, _ in segs) == ms.decode(sampled.tokens)
    kinds = [k for _, k in viz.trace_segments(sampled.steps)]
    assert kinds.count("accepted") == sum(s.accepted for s in sampled.steps)
    assert kinds.count("rejected") == sum(len(drafted(s)) - s.accepted for s in sampled.steps)
    assert kinds.count("bonus") + kinds.count("correction") == len(sampled.steps)
    assert {"accepted", "rejected", "correction"} <= set(kinds), \
        "the fixture should exercise accepted, rejected and correction"


def test_html_and_ansi_traces(sampled):
    # "<" kept, "b" rejected, "&" added
    step = ms.Step(ms.Tree.chain([ord("<"), ord("b")]), [0], ord("&"))
    page = viz.html_trace([step])
    assert "&lt;" in page and "&amp;" in page and "line-through" in page  # escaped, rejected struck
    assert all(c in page for c in viz.COLORS.values())
    text = viz.ansi_trace(sampled.steps)
    assert "\033[9;31m" not in text.split("\n\n")[0]  # rejected drafts hidden by default
    assert "\033[9;31m" in viz.ansi_trace(sampled.steps, show_rejected=True)


def test_plot_pq_bars_are_min_and_residual_mass():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.2, 0.2, 0.5, 0.1])
    fig = viz.plot_pq(p, q, labels="abcd")
    left, right = fig.axes
    kept, res, q_bars = (left.containers[i] for i in range(3))

    def heights(bars):
        return torch.tensor([b.get_height() for b in bars], dtype=torch.float32)
    assert torch.allclose(heights(kept), torch.minimum(p, q))
    assert torch.allclose(heights(kept) + heights(res), p)  # min(p, q) + max(0, p - q) = p
    assert torch.allclose(heights(q_bars), q)
    assert torch.allclose(heights(right.containers[0]), ms.residual(p, q))
    assert f"alpha = {float(ms.acceptance_rate(p, q)):.3f}" in left.get_title()
    plt.close(fig)


def test_plot_pq_top_keeps_the_likeliest_tokens():
    """top=5 shows the 5 largest max(p, q), largest first. Here
    max(p, q) = .04 .02 .30 .40 .20 .28 .25 .15: ids 3 2 5 6 4 (labels d c f g e), whose kept bars
    min(p, q) are .05 .10 .02 .07 .05; alpha uses all 8."""
    p = torch.tensor([0.01, 0.02, 0.30, 0.05, 0.20, 0.02, 0.25, 0.15])
    q = torch.tensor([0.04, 0.01, 0.10, 0.40, 0.05, 0.28, 0.07, 0.05])
    fig = viz.plot_pq(p, q, labels="abcdefgh", top=5)
    kept = next(c for c in fig.axes[0].containers if c.get_label() == "min(p, q): kept")
    shown = torch.tensor([b.get_height() for b in kept], dtype=torch.float32)
    assert torch.allclose(shown, torch.tensor([0.05, 0.10, 0.02, 0.07, 0.05]))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list("dcfge")
    alpha = float(ms.acceptance_rate(p, q))  # the whole vocabulary
    assert f"alpha = {alpha:.3f}" in fig.axes[0].get_title()
    plt.close(fig)
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(256, generator=g), 0)
    q = torch.softmax(3 * torch.randn(256, generator=g), 0)
    top = torch.maximum(p, q).topk(5).indices
    assert top.tolist() != list(range(5))
    fig = viz.plot_pq(p, q, top=5)
    kept = next(c for c in fig.axes[0].containers if c.get_label() == "min(p, q): kept")
    shown = torch.tensor([b.get_height() for b in kept], dtype=torch.float32)
    assert torch.allclose(shown, torch.minimum(p, q)[top])
    plt.close(fig)


def test_plot_accept_hist_matches_counts_and_theory(sampled):
    fig = viz.plot_accept_hist(sampled.steps, alpha=0.5, gamma=4)
    ax = fig.axes[0]
    full = [s.accepted for s in sampled.steps if len(drafted(s)) == 4]
    freq = [b.get_height() for b in ax.containers[0]]
    assert freq == pytest.approx([full.count(n) / len(full) for n in range(5)])
    assert list(ax.lines[0].get_ydata()) == pytest.approx(ms.accepted_pmf(0.5, 4))
    plt.close(fig)
    with pytest.raises(ValueError, match="gamma=9"):
        viz.plot_accept_hist(sampled.steps, gamma=9)


def test_plot_acceptance_and_trace_draw_every_round(sampled):
    fig = viz.plot_acceptance(sampled.steps)
    kept, added, rejected = fig.axes[0].containers
    assert [b.get_height() for b in kept] == [s.accepted for s in sampled.steps]
    assert [b.get_height() for b in rejected] == [len(drafted(s)) - s.accepted
                                                  for s in sampled.steps]
    plt.close(fig)
    fig = viz.plot_trace(sampled.steps)
    drawn = "".join(t.get_text() for t in fig.axes[0].texts[:-len(viz.COLORS)])
    expected = "".join(t for t, _ in viz.trace_segments(sampled.steps))
    expected = expected.replace("\n", "").replace("\t", "    ")
    assert len(drawn) == len(expected)  # every character placed (newlines become line breaks or ⏎)
    plt.close(fig)


def test_explorers_build(byte_pair):
    """Each control is labelled in full, and a control change draws no pyplot figure: a widget's
    callback may run on another thread than the inline backend, which redraws every open pyplot
    figure (two threads drawing one figure tear it; tests/test_browser.py checks in a browser)."""
    target, draft = byte_pair
    plt.close("all")
    w = viz.trace_explorer(target, draft, ["def f(x):", "import os"], max_new_tokens=10,
                           temperature=1.0)
    assert [c.description for c in w.children[:-1]] == ["gamma", "temperature", "prompt", "seed"]
    assert all(c.style.description_width == "initial" for c in w.children[:-1])
    assert w.children[1].value == 1.0  # the opening view
    w.children[0].value = 2  # moving a slider reruns without error
    w.children[2].value = "import os"
    w = viz.pq_explorer(target, draft, "def f(x):")
    assert w.children[0].description == "temperature"
    w.children[0].value = 0.0  # greedy: one-hot p and q
    assert plt.get_fignums() == []


def test_image_is_a_png_drawn_off_pyplot(sampled):
    plt.close("all")
    img = viz.image(viz.plot_acceptance, sampled.steps)
    assert img.data[:8] == b"\x89PNG\r\n\x1a\n" and plt.get_fignums() == []
    ax = viz.plot_acceptance(sampled.steps).axes[0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)  # target calls: 1, 2, 3, no 2.5


def test_trace_of_a_tree_step():
    """A tree round: the trace shows the kept path, then the rest of the draft's most probable
    branch. A round with nothing drafted adds the target's token as a correction, no bonus."""
    tree = ms.Tree()
    a = tree.add(-1, ord("a"), 0.9)
    tree.add(-1, ord("x"), 0.05)
    tree.add(a, ord("c"), 0.3)
    tree.add(a, ord("b"), 0.6)
    step = ms.Step(tree, [a], ord("z"))
    assert drafted(step) == [ord("a"), ord("b")] and step.accepted == 1 and not step.bonus
    assert viz.trace_segments([step]) == [("a", "accepted"), ("b", "rejected"), ("z", "correction")]
    leaf = ms.Step(tree, [a, tree.children(a)[ord("b")]], ord("!"))
    assert leaf.bonus and viz.trace_segments([leaf])[-1] == ("!", "bonus")
    assert drafted(leaf) == [ord("a"), ord("b")]
    empty = ms.Step(ms.Tree(), [], ord("z"))
    assert drafted(empty) == [] and empty.accepted == 0 and not empty.bonus
    assert viz.trace_segments([empty]) == [("z", "correction")]


def test_a_character_over_several_tokens_shows_whole():
    """Decoded alone, each byte of a 2- or 4-byte UTF-8 character was a '\ufffd' of its own (an
    emoji in SmolLM2's byte-level BPE too): the trace showed four of them for one character. Now the
    token that completes it carries it, the ones before carry nothing, a rejected draft reads the
    kept text before it, and a character the output leaves unfinished ends the trace as decoded."""
    e, rocket = list("é".encode()), list("🚀".encode())  # 2 and 4 bytes
    rounds = [ms.Step(ms.Tree(), [], t) for t in e + rocket + [ord("!")]]  # a token a round
    assert [t for t, _ in viz.trace_segments(rounds)] == ["", "é", "", "", "", "🚀", "!"]
    tree = ms.Tree.chain(rocket[:2] + [ord("x")])  # two kept drafts, then one rejected
    step = ms.Step(tree, [0, 1], rocket[2])
    assert not step.bonus and step.accepted == 2
    segs = viz.trace_segments([step, ms.Step(ms.Tree(), [], rocket[3])])
    assert segs == [("", "accepted"), ("", "accepted"), ("\ufffdx", "rejected"),
                    ("", "correction"), ("🚀", "correction")]
    cut = [ms.Step(ms.Tree(), [], t) for t in rocket[:3]]  # max_new_tokens ended mid-character
    assert "".join(t for t, _ in viz.trace_segments(cut)) == ms.decode(rocket[:3]) == "\ufffd"
    assert "\ufffd" not in viz.html_trace(rounds) and "🚀" in viz.ansi_trace(rounds)


def test_draw_tree_labels_every_node_and_the_path():
    tree = ms.Tree.from_paths([[ord("a"), ord("b")], [ord("a"), ord("c")], [ord("d")]])
    ax = viz.draw_tree(tree, path=[0, 1])
    texts = [t.get_text() for t in ax.texts]
    assert sorted(texts) == sorted(["a", "b", "c", "d", "root"])
    light_green = matplotlib.colors.to_rgb("#c8e6c9")
    green = [t.get_text() for t in ax.texts
             if t.get_bbox_patch().get_facecolor()[:3] == light_green]
    assert sorted(green) == ["a", "b"]
    ax = viz.draw_tree(tree, label=lambda t: f"<{t}>")
    assert "<97>" in [t.get_text() for t in ax.texts]


def test_show_prints_the_packages_own_source(capsys):
    viz.show(ms.residual, ms.verify_tree)
    out = capsys.readouterr().out
    assert "def residual(p, q):" in out and "def verify_tree(" in out
    assert "torch.clamp(p - q, min=0)" in out


def test_a_result_is_read_as_its_steps(sampled):
    """viz(res) raised "'Result' object is not iterable": a Result now stands for its steps."""
    assert viz.trace_segments(sampled) == viz.trace_segments(sampled.steps)
    assert viz.html_trace(sampled) == viz.html_trace(sampled.steps)
    for plot in (viz.plot_acceptance, viz.plot_accept_hist, viz.plot_trace):
        a, b = plot(sampled), plot(sampled.steps)
        assert len(a.axes[0].patches) == len(b.axes[0].patches) > 0 or plot is viz.plot_trace
        assert [t.get_text() for t in a.axes[0].texts] == [t.get_text() for t in b.axes[0].texts]
        plt.close("all")
