"""Bad input that stop 50 left raising a TypeError or AttributeError from inside (the core was at
its line cap): each is now a ValueError that names the problem. Each such test failed before its
fix; two more keep what the shared checks must still take."""
import pytest
import torch

import minispec as ms


def test_the_arguments_swapped_is_named(byte_pair):
    """speculative_generate(drafter, target): an AttributeError on the Drafter's missing config."""
    target, draft = byte_pair
    for drafter in (ms.load_drafter("lookup", target), ms.ModelDrafter(draft)):
        with pytest.raises(ValueError, match=r"target must be a model.*\(target, drafter"):
            ms.speculative_generate(drafter, target, [1, 2, 3], 4)
    with pytest.raises(ValueError, match="target must be a model, got a str"):
        ms.speculative_generate("target", draft, [1, 2, 3], 4)


@pytest.mark.parametrize("temperature", [torch.tensor([1.0, 2.0]), torch.ones(2, 2)])
def test_a_tensor_temperature_must_hold_one_number(byte_pair, temperature):
    """A tensor of several temperatures: torch's RuntimeError on an ambiguous truth value."""
    target, draft = byte_pair
    with pytest.raises(ValueError, match="temperature must be a number"):
        ms.generate(target, [1, 2, 3], 4, temperature=temperature)
    with pytest.raises(ValueError, match="temperature must be a number"):
        ms.speculative_generate(target, draft, [1, 2, 3], 4, temperature=temperature)
    with pytest.raises(ValueError, match="temperature must be a number"):
        ms.probs(torch.zeros(3), temperature=temperature)


def test_a_tensor_holding_one_temperature_still_decodes(byte_pair):
    """The fix keeps what worked: a tensor with one value decodes as that number does."""
    target, draft = byte_pair
    want = ms.generate(target, [1, 2, 3], 6, temperature=0.5, seed=3).tokens
    for t in (torch.tensor(0.5), torch.tensor([0.5])):
        assert ms.generate(target, [1, 2, 3], 6, temperature=t, seed=3).tokens == want


@pytest.mark.parametrize("kwargs, match", [(dict(temperature="1"), "temperature must be a number"),
                                           (dict(temperature=None), "temperature must be a number"),
                                           (dict(top_p="0.9"), "top_p .*must be a number")])
def test_probs_names_a_value_that_is_not_a_number(kwargs, match):
    """probs(temperature="1") was a TypeError from `"1" >= 0` (generate already checked it)."""
    with pytest.raises(ValueError, match=match):
        ms.probs(torch.zeros(3), **kwargs)


@pytest.mark.parametrize("value", ["1", None, [1.0]])
def test_a_score_temperature_that_is_not_a_number(byte_pair, value):
    """A string or None score_temperature was a TypeError from `not value > 0`."""
    _, draft = byte_pair
    with pytest.raises(ValueError, match="score_temperature must be a number"):
        ms.ModelDrafter(draft, branching=(2, 1), score_temperature=value)


def test_a_none_token_in_the_rules_is_named():
    """float(None) inside verify's checks: a TypeError in all three rules."""
    p, q = torch.full((2, 3), 1 / 3), torch.full((1, 3), 1 / 3)
    draft = r"each draft token must be an integer in \[0, 3\), got "
    cand = "each candidate must be "
    with pytest.raises(ValueError, match=draft + "None"):
        ms.greedy_accept([None], p)
    with pytest.raises(ValueError, match=draft + "None"):
        ms.speculative_accept([None], q, p)
    with pytest.raises(ValueError, match=cand + "an integer in .0, 3., got None"):
        ms.multi_draft_accept([None], q[0], p[0])
    with pytest.raises(ValueError, match=cand + "an integer in .0, 3., got 'a'"):
        ms.multi_draft_accept(["a"], q[0], p[0])


def test_the_rules_still_take_tensor_and_numpy_ids():
    """The shared check keeps the ids a rule took before: tensor elements, numpy ints, 2.0."""
    import numpy as np
    p = torch.eye(3)[[2, 1, 0]]
    assert ms.greedy_accept(torch.tensor([2, 0]), p) == (1, 1)
    assert ms.greedy_accept([np.int64(2), 1.0], p) == (2, 0)
    assert ms.multi_draft_accept(torch.tensor([1]), None, torch.eye(3)[1]) == 1
