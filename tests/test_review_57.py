"""A review of stop 57's leftovers, each a crash where a clear answer was due:
  - a (B, T) numpy array of prompts was read as one prompt whose token ids were arrays, and
    refused as "each token id must be an integer" (a tensor of the same shape was a batch);
  - ModelDrafter(None) raised an AttributeError from inside its constructor, as did the beam,
    early-exit, layer-skip, learned-stop and streaming drafters;
  - timing.spread and timing.agreement raised a TypeError given a generator (no len), and
    timing.step_costs(model, 4) one from iterating an int."""
import numpy as np
import pytest
import torch

import minispec as ms
from minispec.kit import timing


@pytest.fixture(scope="module")
def target(random_gpt):
    return random_gpt(vocab_size=16, block_size=32, seed=3)


def test_a_numpy_batch_is_a_batch_as_the_tensor_is(target):
    rows = [[1, 2, 3], [4, 5, 6]]
    for prompts in (np.array(rows), np.array(rows, dtype=np.int32)):
        got = ms.generate(target, prompts, 4)
        want = ms.generate(target, torch.tensor(rows), 4)
        assert isinstance(got, list) and len(got) == 2
        assert [r.tokens for r in got] == [r.tokens for r in want]


def test_one_numpy_row_is_one_prompt_as_the_tensor_is(target):
    got = ms.speculative_generate(target, ms.PromptLookupDrafter(), np.array([[1, 2, 1, 2]]), 5)
    want = ms.speculative_generate(target, ms.PromptLookupDrafter(), [1, 2, 1, 2], 5)
    assert got.tokens == want.tokens == ms.generate(target, [1, 2, 1, 2], 5).tokens


def test_a_three_dimensional_array_is_still_refused(target):
    with pytest.raises(ValueError, match="token id"):
        ms.generate(target, np.zeros((1, 2, 3), dtype=np.int64), 2)


def drafters_of_a_model():
    from minispec.methods.beam import BeamDrafter
    from minispec.methods.layer_skip import LayerSkipDrafter
    from minispec.methods.learned_stop import LearnedStopDrafter
    from minispec.methods.streaming import StreamingDrafter
    return [ms.ModelDrafter, BeamDrafter, ms.EarlyExitDrafter, LayerSkipDrafter,
            LearnedStopDrafter, StreamingDrafter]


@pytest.mark.parametrize("kind", drafters_of_a_model(), ids=lambda kind: kind.__name__)
@pytest.mark.parametrize("model", [None, "draft", 3])
def test_a_drafter_of_a_model_names_a_missing_model(kind, model):
    with pytest.raises(ValueError, match="must be a GPT or a Llama, got a "):
        kind(model)


@pytest.mark.parametrize("kind", drafters_of_a_model(), ids=lambda kind: kind.__name__)
def test_a_drafter_of_a_model_still_takes_the_model(kind, random_gpt):
    target = random_gpt(vocab_size=16, n_layer=3, block_size=32, seed=3)
    drafter = kind(target) if kind is not ms.ModelDrafter else kind(random_gpt(16, seed=4))
    got = ms.speculative_generate(target, drafter, [1, 2, 3, 1, 2], 6, gamma=3)
    assert got.tokens == ms.generate(target, [1, 2, 3, 1, 2], 6).tokens


def test_spread_and_agreement_take_any_iterable():
    ratios = [1.5, 0.8, 1.02]
    assert timing.spread(r for r in ratios) == timing.spread(ratios) == "1.02x (0.80-1.50)"
    said = timing.agreement((r for r in ratios), 0.05)
    assert said == timing.agreement(np.array(ratios), 0.05)
    assert said == ("mixed", "faster on 1, slower on 1, within noise on 1 of 3 prompts")
    for empty in ([], iter([])):
        with pytest.raises(ValueError, match="at least one ratio"):
            timing.agreement(empty, 0.05)
        with pytest.raises(ValueError, match="no ratios"):
            timing.spread(empty)


def test_step_costs_takes_one_k_as_a_number(target):
    one = timing.step_costs(target, 2, context=4, reps=2)
    assert list(one) == [2] and one[2] > 0
    assert list(timing.step_costs(target, np.int64(3), context=4, reps=2)) == [3]
    with pytest.raises(ValueError, match="k must be an integer"):
        timing.step_costs(target, 2.5, context=4, reps=2)


# --- the kit's pictures (a bug hunt of stop 57) ---------------------------------------------------

class Oracle(ms.Drafter):
    """Drafts the target's own greedy answer: every draft is kept."""

    def __init__(self, prompt, answer):
        self.n, self.answer = len(prompt), answer

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        start = len(context) - self.n
        return ms.Tree.chain(self.answer[start:start + min(gamma, depth)])


def test_a_kept_eos_is_drawn_as_accepted_with_nothing_after_it(target):
    """The loop ends a round at an eos the target kept as a draft (rounds.finish), with the eos as
    the round's token: the trace drew that draft struck through, then a 'correction' equal to it."""
    from minispec import viz
    prompt = [1, 2, 3]
    answer = ms.generate(target, prompt, 20).tokens
    at = next(j for j in range(1, 20) if j % 5 not in (0, 4) and answer[j] not in answer[:j])
    eos = answer[at]  # first emitted mid-block: a kept draft with drafts after it in its round
    res = ms.speculative_generate(target, Oracle(prompt, answer), prompt, 20, gamma=4,
                                  eos_token=eos)
    assert res.tokens == answer[:at + 1] == ms.generate(target, prompt, 20, eos_token=eos).tokens
    last = res.steps[-1]
    assert last.token == eos and viz.ended_at_eos(last)
    assert not any(viz.ended_at_eos(s) for s in res.steps[:-1])
    segments = viz.trace_segments(res, show_rejected=True, decode=str)
    assert [text for text, _ in segments] == [str([t]) for t in res.tokens]
    assert segments[-1][1] == "accepted" and {"rejected", "correction"}.isdisjoint(
        kind for _, kind in segments)
    fig = viz.plot_acceptance(res)
    assert fig.axes[0].get_title().startswith(f"{len(res.tokens)} tokens in {len(res.steps)} ")


def test_a_batch_or_nothing_is_refused_by_name(target):
    from minispec import viz
    batch = ms.speculative_generate(target, ms.PromptLookupDrafter(), [[1, 2, 1, 2], [3, 4]], 4)
    for draw in (viz.html_trace, viz.ansi_trace, viz.plot_acceptance, viz.plot_accept_hist,
                 viz.trace_segments):
        for given in (batch, None):
            with pytest.raises(ValueError, match="one prompt's Result"):
                draw(given)
    one = viz.html_trace(batch[0])  # a row at a time works
    assert one.startswith("<pre")


def test_plot_pq_names_shapes_labels_and_top():
    from minispec import viz
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.2, 0.6])
    with pytest.raises(ValueError, match=r"each \(V,\)"):
        viz.plot_pq(p[None], q[None])
    with pytest.raises(ValueError, match="labels must name each of the 3 tokens"):
        viz.plot_pq(p, q, labels="ab")
    for top in (-1, 0, 1.5, "2"):
        with pytest.raises(ValueError, match="top"):
            viz.plot_pq(p, q, top=top)
    assert len(viz.plot_pq(p, q, top=2.0).axes[0].patches) == 3 * 2  # three bars a token


def test_the_explorers_want_texts(target):
    from minispec import viz
    for prompts in ("def ", [], [ms.encode("def ")], {"a": ""}):
        with pytest.raises(ValueError, match="text"):
            viz.trace_explorer(target, ms.PromptLookupDrafter(), prompts)
    for prompt in ("", ms.encode("def "), None):
        with pytest.raises(ValueError, match="text"):
            viz.pq_explorer(target, target, prompt)
    # max_new_tokens fits this target's block of 32 (the default 60 fails every redraw: refused)
    assert viz.trace_explorer(target, ms.PromptLookupDrafter(), {"a": "def "}, 16) is not None


def test_draw_tree_takes_no_path_as_none():
    from minispec import viz
    tree = ms.Tree.chain([5, 6, 7])
    assert viz.draw_tree(tree, None) is not None


def test_kl_takes_zeros_in_p_as_0_log_0():
    """A warped p (top-k) has zeros: 0 * (-inf - log q) was nan, where KL's 0 log 0 is 0."""
    from minispec.kit import training
    half, one = torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0])
    kl = training.divergence(one.log(), half.log(), "kl")
    assert torch.isclose(kl, torch.tensor(2.0).log())
    assert training.divergence(half.log(), one.log(), "kl") == float("inf")  # q misses p's mass
    logits = torch.tensor([3.0, 1.0, 0.0])
    kept = ms.probs(logits, top_k=2)
    want = sum(float(p * (p / q).log()) for p, q in zip(kept, logits.softmax(-1)) if p > 0)
    got = training.divergence(kept.log(), logits.log_softmax(-1), "kl")
    assert abs(float(got) - want) < 1e-6


def test_exact_law_keys_outcomes_by_value():
    """Tensors hash by identity: two draws of tensor(0) were two keys; a list was unhashable."""
    from minispec.kit import checks
    fair = torch.full((4,), 0.25)
    assert checks.exact_law(lambda: torch.multinomial(fair, 1)[0] % 2) == {0: 0.5, 1: 0.5}
    assert checks.exact_law(lambda: [ms.sample(fair) % 2]) == {(0,): 0.5, (1,): 0.5}
    pairs = checks.exact_law(lambda: torch.multinomial(fair, 2) // 2)  # two distinct ids of 4
    assert pairs == pytest.approx({(0, 0): 1 / 6, (0, 1): 1 / 3, (1, 0): 1 / 3, (1, 1): 1 / 6})


def test_a_ragged_cache_crops_to_whole_lengths(random_gpt):
    from minispec.batch import RaggedCache, feed
    model = random_gpt(vocab_size=16, block_size=32, seed=3)
    cache = RaggedCache(model.config, 2)
    feed(model, cache, [[1, 2, 3, 4], [5]])
    for bad in ([0.5, 0], [None, 0], 1.5):
        with pytest.raises(ValueError, match="each row's length"):
            cache.crop(bad)
    cache.crop(np.int64(1))  # numpy's ints as Python's: every row
    assert cache.lengths == [1, 1]
    cache.crop([np.int64(0), 1])
    assert cache.lengths == [0, 1]


def test_a_float_mask_is_refused_by_the_llama():
    """SDPA adds a float mask to the scores: a 0/1 float mask shifted them, masking nothing."""
    from minispec.bridge.llama import Llama, LlamaConfig
    model = Llama(LlamaConfig(vocab_size=16, n_layer=2, n_head=2, n_kv_head=1, n_embd=8,
                              n_hidden=16, block_size=64)).eval()
    idx, causal = torch.tensor([[1, 2, 3]]), torch.ones(3, 3, dtype=torch.bool).tril()
    assert torch.equal(model(idx, mask=causal), model(idx))
    for mask in (causal.float(), causal.long()):
        with pytest.raises(ValueError, match="mask must be a bool tensor"):
            model(idx, mask=mask)


def test_the_kit_names_text_where_ids_are_due(random_gpt):
    from minispec.kit import checks, data, training
    for given in ("hello", None, [[1, 2], [3]]):
        with pytest.raises(ValueError, match="data must be token ids"):
            data.token_ids(given)
    g = torch.Generator().manual_seed(0)
    x, y = training.get_batch(b"hello world " * 10, 2, 8, g)
    assert x.dtype == torch.long and torch.equal(x[:, 1:], y[:, :-1])
    with pytest.raises(ValueError, match="batch_size must be an integer"):
        training.get_batch(list(range(50)), 0, 8, g)
    model = random_gpt(vocab_size=4, n_layer=1, block_size=8, seed=1)
    assert torch.equal(checks.target_law(model, [1.0, 2], 1), checks.target_law(model, [1, 2], 1))
    with pytest.raises(ValueError, match="each prompt token id"):
        checks.target_law(model, [1.5], 1)
