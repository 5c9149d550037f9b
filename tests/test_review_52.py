"""A review beyond the core (stop 52): what it found wrong, each test failing before its fix.

The one wrong output: an eos_token that the target kept *as a draft* ended the Result's tokens,
but the round's Step still listed the drafts after it, so the steps, `stats.kept_fraction` and
every trace and plot counted tokens the Result had cut (6 tokens returned, 14 in the steps).
The last section: a mutation audit beyond the core, one test for each mutant that got through.
"""
import numpy as np
import pytest
import torch

import minispec as ms
from minispec.bridge.llama import Llama, LlamaConfig
from minispec.kit import checks, data, timing, viz
from minispec.methods.heads import HeadDrafter, MedusaHeads, medusa_tree

EOS = 32  # a space: frequent in the held-out code, so a kept draft is often one


def heldout_prompt(n=150):
    return list(data.heldout_files()[-1][:n])  # textwrap.py's first bytes


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
    """The reviewer's case, where the target kept the eos as one of EAGLE's drafts and more drafts
    after it (6 tokens returned, 14 in the steps, before the fix): the test above is not vacuous.
    The last Step ends at the eos, which is a drafted child of its kept path's end."""
    res = ms.speculative_generate(shipped, ms.load_drafter("eagle", shipped), heldout_prompt(),
                                  60, gamma=8, eos_token=EOS)
    last = res.steps[-1]
    assert last.token == EOS
    assert last.tree.children(last.path[-1] if last.path else -1).get(EOS) is not None


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
    with pytest.raises(ValueError, match="no round drafted gamma=0 tokens"):
        viz.plot_accept_hist(nothing)
    for res in (ms.generate(shipped, ids, 3), []):  # no rounds at all (trace.rounds_of)
        with pytest.raises(ValueError, match="no rounds"):
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


# --- a mutation audit of kit/checks, batch/ and methods/: each test kills a mutant that passed ----

LENGTHS = [7, 19, 33, 48, 64, 90]


@pytest.fixture(scope="module")
def shipped_pair(shipped):
    return shipped, ms.load_model("draft")


@pytest.fixture(scope="module")
def ragged_prompts():
    return [p[:n] for p, n in zip(data.prompts(8, length=150), LENGTHS)]


@pytest.mark.parametrize("how", ["confidence stop", "fallback"])
def test_batched_rows_take_the_rounds_each_prompt_takes_alone(shipped_pair, ragged_prompts, how):
    """Not only the tokens: the drafts, kept paths and added tokens of every round. Dropping the
    confidence stop, the fallback's then_gamma or a draft cache's crop in the batched loop kept the
    tokens and changed the rounds."""
    target, draft = shipped_pair

    def make():
        if how == "confidence stop":
            return ms.ModelDrafter(draft, threshold=0.5)
        return ms.FallbackDrafter(ms.PromptLookupDrafter(min_n=3), ms.ModelDrafter(draft), 2)

    def rounds(outs):
        return [[(s.tree.tokens, s.path, s.token) for s in o.steps] for o in outs]

    batch = rounds(ms.speculative_generate(target, make(), ragged_prompts, 24, gamma=3))
    alone = [ms.speculative_generate(target, make(), p, 24, gamma=3) for p in ragged_prompts]
    assert batch == rounds(alone)


def test_a_shared_policy_hears_every_rows_round(shipped_pair, ragged_prompts):
    target, draft = shipped_pair
    heard = []

    class Spy(ms.Heuristic):
        def update(self, step):
            heard.append(step)
            super().update(step)

    outs = ms.speculative_generate(target, draft, ragged_prompts[:3], 16, gamma=Spy(2))
    assert len(heard) == sum(len(o.steps) for o in outs) > 0


def test_exact_law_refuses_a_rand_of_another_size():
    """A coin is torch.rand(()): a law for torch.rand(2) would be the law of code that crashes."""
    with pytest.raises(NotImplementedError, match=r"torch.rand\(2"):
        checks.exact_law(lambda: bool(torch.rand(2) < 0.3))


def test_medusa_tree_multiplies_accuracies_along_a_path():
    """Gains: (0,) 0.5, (1,) 0.45, (0, 0) 0.5 * 0.8 = 0.4, so the second node is (1,)."""
    assert medusa_tree([[0.5, 0.45], [0.8, 0.1]], 2) == [(0,), (1,)]


def test_hydra_depth_d_reads_its_own_branchs_guess():
    torch.manual_seed(0)
    m = ms.GPT(ms.GPTConfig(vocab_size=16, n_layer=2, n_head=2, n_embd=32, block_size=64)).eval()
    heads = MedusaHeads(m, 2, sequential=True)
    calls, advance = [], heads.advance

    def recording(z, i, token):
        calls.append((i, list(token)))
        return advance(z, i, token)
    heads.advance = recording
    d = HeadDrafter(heads, [(0,), (1,), (0, 0), (1, 0)])
    d.reset(m, None)
    d.h = m.features(torch.tensor([[3, 1, 4]]))[0, -1].detach()
    d.seen = [3, 1, 4]  # the context h was read on (accept sets both)
    tree = d.draft([3, 1, 4, 7], 4)
    assert calls == [(0, [7]), (1, tree.tokens[:2])]


def test_feed_on_a_llama_keeps_rows_alike_causal():
    """Rows of one length after a cache: a Llama's blocks need the causal mask that feed builds
    (a GPT's attention makes its own); only ragged rows were tested."""
    torch.manual_seed(0)
    m = Llama(LlamaConfig(vocab_size=16, block_size=64, n_layer=2, n_head=2, n_kv_head=1,
                          n_embd=16, n_hidden=32)).eval()
    with torch.no_grad():
        for new in ([[5, 6], [7, 8]], [[5, 6, 9], [7, 8, 9]]):  # rows alike: T = 2 and T = 3
            cache = ms.batch.RaggedCache(m.config, 2, 16)
            ms.batch.feed(m, cache, [[1, 2], [3, 4]])
            got = ms.batch.feed(m, cache, new)[1]
            want = m(torch.tensor([[1, 2] + new[0], [3, 4] + new[1]]))[:, 2:]
            assert torch.allclose(got, want, atol=1e-5)
