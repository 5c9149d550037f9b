"""A review of stop 55 (bad input to the real model's classes and the timing kit): each case
crashed with a TypeError or a RuntimeError from inside torch, or ran with no word; now a
ValueError names the problem, or the input is read as it was meant."""
import pytest
import torch

import minispec as ms
from minispec.bridge.llama import Llama, LlamaConfig
from minispec.kit import timing

SMALL = dict(n_layer=1, n_head=2, n_kv_head=1, n_embd=8, n_hidden=16, block_size=32)


def test_a_whole_float_in_the_config_is_stored_as_an_int():
    """LlamaConfig checked vocab_size=8.0 and kept the float: Llama(config) raised a TypeError
    from torch.empty."""
    config = LlamaConfig(vocab_size=8.0, **SMALL)
    assert type(config.vocab_size) is int and config.vocab_size == 8
    assert Llama(config)(torch.tensor([[1, 2]])).shape == (1, 2, 8)


@pytest.fixture
def llama():
    torch.manual_seed(0)
    return Llama(LlamaConfig(vocab_size=8, **SMALL)).eval()


@pytest.mark.parametrize("bad, says", [
    (lambda m: m(torch.tensor([[1.0, 2.0]])), "token ids"),  # floats: an embedding's RuntimeError
    (lambda m: m(torch.tensor([[True, False]])), "token ids"),
    (lambda m: m(torch.tensor([[1, 2], [3, 4]]), m.new_cache()), "new_cache\\(batch_size=2\\)"),
    (lambda m: m(torch.tensor([[1, 2, 3]]), pos=torch.arange(2)), r"\(B, T\) = \(1, 3\)"),
    (lambda m: m(torch.tensor([[1, 2]]), pos=torch.tensor([-1, 0])), r"positions in \[0"),  # silent
    (lambda m: m(torch.tensor([[1, 2]]), pos=torch.tensor([0, 32])), "block_size=32"),
])
def test_bad_input_to_the_llama_is_named(llama, bad, says):
    with pytest.raises(ValueError, match=says):
        bad(llama)


def test_a_cache_of_the_right_rows_and_explicit_positions_still_work(llama):
    """The checks above refuse nothing the loop sends: two rows on a two-row cache, and a chain's
    own positions given explicitly, give the logits of the default."""
    x = torch.tensor([[1, 2, 3], [3, 2, 1]])
    with torch.no_grad():
        want = llama(x)
        assert torch.equal(llama(x, llama.new_cache(batch_size=2)), want)
        assert torch.equal(llama(x, pos=torch.arange(3)), want)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, "2"])
def test_call_costs_checks_its_batch_size(llama, batch_size):
    """batch_size=0 timed an empty forward and returned a number; -1, 2.5 and "2" raised from
    torch.zeros."""
    with pytest.raises(ValueError, match="batch_size"):
        timing.step_costs(llama, [1, 2], context=4, reps=1, batch_size=batch_size)



def test_load_heads_names_a_name_that_is_no_path():
    """load_heads(target, None) raised a TypeError from pathlib."""
    with pytest.raises(ValueError, match="'medusa', 'hydra' or a file's path"):
        ms.load_heads(ms.load_model("target"), None)


def test_verdict_reads_the_band_both_ways():
    """noise_band is two-sided (max(r, 1/r) - 1), but verdict called slower only below 1 - band:
    0.905x, the method's time 10.5% over the base's, was "the same" against a 10% band, while
    1.105x was "faster". Now each is judged by how far its time lands from the base's; rows of
    equal work in the demo share a two-sided band too (demo.verdicts)."""
    assert timing.verdict(0.905, 0.1) == "slower" and timing.verdict(1.105, 0.1) == "faster"
    assert timing.verdict(1 / 1.099, 0.1) == timing.verdict(1.099, 0.1) == "the same (within noise)"
    cost = 1.33 * 1.105  # a round's steps 10.5% over its tokens: a slowdown beyond 10%
    assert "costs more steps than" in timing.round_line({"draft": 0, "score": cost, "rest": 0},
                                                        1.33, 0.1)


def test_tree_children_come_from_the_logits_not_an_underflowed_softmax():
    """score_temperature 0.01 turned the draft's softmax into exact zeros past its top token, and
    the children at temperature 0 were the zeros' first ids, [10, 1, 3, 0], not the draft's
    top 4; score_temperature=inf was accepted."""
    draft, ids = ms.load_model("draft"), ms.encode("def f(x):")
    with torch.inference_mode():
        top = draft(torch.tensor([ids]))[0, -1].topk(4).indices.tolist()
    for t in (0.01, 1.0):
        tree = ms.ModelDrafter(draft, branching=(4,), score_temperature=t).draft(ids, 4)
        assert tree.tokens == top
    with pytest.raises(ValueError, match="score_temperature must be finite"):
        ms.ModelDrafter(draft, branching=(4,), score_temperature=float("inf"))


def test_typical_accept_checks_its_parameters():
    """delta=-1 made the threshold negative: every candidate was kept, a token p gives 0 among
    them (a decode emitted one); a candidate of -1 came back as the token."""
    from minispec.methods import typical_accept
    p = torch.tensor([0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="eps and delta"):
        typical_accept([2], None, p, delta=-1.0)
    for bad in ([-1], [3]):
        with pytest.raises(ValueError, match="each candidate"):
            typical_accept(bad, None, p)
    assert typical_accept([1], None, p) == 1


def test_fallback_refuses_one_drafter_twice():
    """FallbackDrafter(d, d) drafted twice a round (then = first) and kept up twice: EAGLE's
    features were doubled and the loop raised a size mismatch."""
    d = ms.load_drafter("eagle", ms.load_model("target"))
    with pytest.raises(ValueError, match="the same drafter"):
        ms.FallbackDrafter(d, d)


def test_prompts_are_as_long_as_asked_or_refused():
    """data.prompts(3, length=20000) gave prompts of 18,532 and 17,233 bytes."""
    with pytest.raises(ValueError, match="bytes left in its file"):
        ms.data.prompts(3, length=20000)
    assert {len(p) for p in ms.data.prompts(8)} == {128}
