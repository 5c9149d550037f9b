"""A review beyond the core (stop 52): what it found wrong, each test failing before its fix.

The one wrong output: an eos_token that the target kept *as a draft* ended the Result's tokens,
but the round's Step still listed the drafts after it, so the steps, `stats.kept_fraction` and
every trace and plot counted tokens the Result had cut (6 tokens returned, 14 in the steps).
"""
import numpy as np
import pytest

import minispec as ms
from minispec.kit import data, timing, viz

EOS = 32  # a space: frequent in the held-out code, so a kept draft is often one


def heldout_prompt(n=150):
    return ms.encode(data.heldout_files()[-1].decode())[:n]  # textwrap.py's first bytes


def steps_say_the_tokens(res):
    """The kept drafts and the added token of every round, in order, are the Result's tokens."""
    said = [t for s in res.steps for t in [s.tree.tokens[i] for i in s.path] + [s.token]]
    return said == res.tokens


@pytest.mark.parametrize("name", ["eagle", "lookup", "draft", "medusa"])
def test_an_eos_kept_as_a_draft_ends_its_round_in_the_steps(shipped, name):
    ids = heldout_prompt()
    res = ms.speculative_generate(shipped, ms.load_drafter(name, shipped), ids, 60, gamma=8,
                                  eos_token=EOS)
    assert res.tokens == ms.generate(shipped, ids, 60, eos_token=EOS).tokens
    assert res.tokens[-1] == EOS and res.steps[-1].token == EOS
    assert steps_say_the_tokens(res)
    kept = sum(s.accepted for s in res.steps)
    assert res.stats.kept_fraction == kept / res.stats.drafted
    assert res.stats.tokens_per_call == len(res.tokens) / len(res.steps)
    assert "".join(t for t, _ in viz.trace_segments(res, False)) == ms.decode(res.tokens)
    title = viz.plot_acceptance(res).axes[0].get_title()
    assert title.startswith(f"{len(res.tokens)} tokens in {len(res.steps)} target calls")


def test_the_cut_happened_in_the_case_the_review_reported(shipped):
    """The reviewer's case: the last round kept 8 drafts of EAGLE's, the first of them the eos.
    Its Step now keeps no draft and records the eos as the round's token."""
    res = ms.speculative_generate(shipped, ms.load_drafter("eagle", shipped), heldout_prompt(),
                                  60, gamma=8, eos_token=EOS)
    last = res.steps[-1]
    assert len(res.tokens) == 6 and last.path == [] and last.token == EOS
    assert last.tree.children(-1).get(EOS) is not None  # the eos was the draft's first token


def test_a_batch_cuts_its_rows_steps_alike(shipped):
    ids = heldout_prompt()
    prompts = [ids, ids[:90], ids[:120]]
    lookup = ms.load_drafter("lookup", shipped)
    out = ms.speculative_generate(shipped, lookup, prompts, 40, gamma=6, eos_token=EOS)
    for res, p in zip(out, prompts):
        assert res.tokens == ms.generate(shipped, p, 40, eos_token=EOS).tokens
        assert steps_say_the_tokens(res)


class Policy:
    """A hand-written draft-length policy whose gamma is whatever it was given."""

    def __init__(self, gamma):
        self.start = self.gamma = gamma

    def reset(self):
        self.gamma = self.start

    def update(self, step):
        pass


@pytest.mark.parametrize("gamma", [0, -2, 2.5, None])
def test_the_batched_loop_checks_a_policys_gamma_as_the_one_prompt_loop(shipped, gamma):
    """Batched, gamma 0 or -2 drafted nothing silently; 2.5 overflowed a cache; None: TypeError."""
    ids = heldout_prompt(40)
    for prompts in (ids, [ids, ids[:5]]):
        with pytest.raises(ValueError, match="the policy's gamma must be an integer >= 1"):
            ms.speculative_generate(shipped, shipped, prompts, 8, gamma=Policy(gamma))


def test_a_policys_whole_float_gamma_batches_as_its_int(shipped):
    ids = heldout_prompt(40)
    lookup = ms.load_drafter("lookup", shipped)
    got = ms.speculative_generate(shipped, lookup, [ids, ids[:5]], 8, gamma=Policy(3.0))
    want = ms.speculative_generate(shipped, lookup, [ids, ids[:5]], 8, gamma=3)
    assert [r.tokens for r in got] == [r.tokens for r in want]
    assert [len(s.tree.tokens) for s in got[0].steps] == [len(s.tree.tokens) for s in want[0].steps]


def test_plot_accept_hist_says_when_there_is_nothing_to_count(shipped):
    """It raised max()'s 'arg is an empty sequence', or a NaN alpha when nothing was drafted."""
    ids = ms.encode("qzwx")
    nothing = ms.speculative_generate(shipped, ms.load_drafter("lookup", shipped), ids, 3)
    assert nothing.stats.drafted == 0
    for res in (ms.generate(shipped, ids, 3), nothing, []):
        with pytest.raises(ValueError, match="no round drafted gamma=0 tokens"):
            viz.plot_accept_hist(res)


@pytest.mark.parametrize("ratio", [float("nan"), -1.0, 0.0])
def test_verdict_needs_a_ratio_of_two_times(ratio):
    """verdict(nan, .05) said "the same (within noise)" and verdict(-1.0, .05) "slower"."""
    with pytest.raises(ValueError, match="ratio must be a speedup > 0"):
        timing.verdict(ratio, 0.05)


def test_agreement_takes_an_array_of_ratios():
    """agreement(np.array(...)) raised numpy's 'truth value of an array is ambiguous'."""
    assert timing.agreement(np.array([1.2, 1.3]), 0.05) == timing.agreement([1.2, 1.3], 0.05)
    with pytest.raises(ValueError, match="at least one ratio"):
        timing.agreement(np.array([]), 0.05)


@pytest.mark.parametrize("kwargs, match", [(dict(n=-1), "n must be an integer >= 1"),
                                           (dict(n=2.5), "n must be an integer >= 1"),
                                           (dict(n=2, offset=-1), "offset must be an integer >= 0"),
                                           (dict(n=2, length=0), "length must be an integer >= 1")])
def test_heldout_prompts_are_counted_in_whole_numbers(kwargs, match):
    """prompts(-1) and prompts(2, length=0) returned empty lists; offset=-1 read a file's start."""
    with pytest.raises(ValueError, match=match):
        data.prompts(**kwargs)


def test_alignment_and_bits_per_byte_need_a_window(byte_pair):
    """alignment(windows=0) divided by zero; bits_per_byte(max_windows=0) blamed the data."""
    target, draft = byte_pair
    with pytest.raises(ValueError, match="windows must be an integer >= 1"):
        data.alignment(target, draft, data.heldout()[:3000], 64, windows=0)
    with pytest.raises(ValueError, match="max_windows must be an integer >= 1"):
        data.bits_per_byte(target, data.heldout()[:3000], 64, max_windows=0)

