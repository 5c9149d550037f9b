"""generate and speculative_generate: greedy equality, exact losslessness of sampling, edge cases.

Sampling is checked against the exact law of the target's continuations (every sequence of 3
tokens over a tiny vocabulary, enumerated) with a chi-square test over fixed seeds; the same check
must flag four lossy decoders (negative controls).
"""
import collections
import copy
import sys

import pytest
import torch

import minispec as ms
from minispec.model import WEIGHTS_DIR

PROMPTS = ["def f(x):", "x", "import os\n", "class A:\n    ", "    return", "for i in range(10):",
           "\xe9t\xe9 \u2603", "#!", "while True:\n        pass", "a = [1, 2, 3]; b = a[::-1]"]


@pytest.fixture(scope="module")
def greedy_refs(byte_pair):
    """Plain greedy decoding of every prompt: the reference speculative decoding must reproduce."""
    target, _ = byte_pair
    return {p: ms.generate(target, ms.encode(p), 24).tokens for p in PROMPTS}


# --- greedy: speculative decoding returns the target's own greedy text ---------------------------

@pytest.mark.parametrize("gamma", range(1, 9))
def test_greedy_speculative_equals_generate(byte_pair, greedy_refs, gamma):
    target, draft = byte_pair
    accepted = collections.Counter()
    for prompt in PROMPTS:
        res = ms.speculative_generate(target, draft, ms.encode(prompt), 24, gamma=gamma)
        assert res.tokens == greedy_refs[prompt], prompt
        accepted.update(s.accepted for s in res.steps)
    assert accepted[0] and sum(accepted.values()) > accepted[0]  # rejections and acceptances happened


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_ignores_top_k_top_p(byte_pair, greedy_refs, gamma):
    target, draft = byte_pair
    for prompt in PROMPTS[:4]:
        res = ms.speculative_generate(target, draft, ms.encode(prompt), 24, gamma=gamma, top_k=5, top_p=0.7)
        assert res.tokens == greedy_refs[prompt]
        assert ms.generate(target, ms.encode(prompt), 24, top_k=5, top_p=0.7).tokens == greedy_refs[prompt]


@pytest.mark.parametrize("kind", ["target_itself", "unrelated"])
def test_greedy_with_perfect_and_useless_drafts(byte_pair, greedy_refs, random_gpt, kind):
    """A draft identical to the target keeps everything (a bonus every round); an unrelated one
    keeps next to nothing. Either way the text is the target's."""
    target, _ = byte_pair
    draft = copy.deepcopy(target) if kind == "target_itself" else random_gpt(seed=99, n_layer=1)
    for gamma in (1, 6):
        for prompt in PROMPTS[:3]:
            res = ms.speculative_generate(target, draft, ms.encode(prompt), 24, gamma=gamma)
            assert res.tokens == greedy_refs[prompt]
            if kind == "target_itself":
                assert all(s.bonus for s in res.steps)
                assert res.stats["acceptance_rate"] == 1.0


class RepeatLastDrafter(ms.Drafter):
    """A stateless deterministic drafter (like prompt lookup): propose the last token again; one-hot q."""

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        tokens = [context[-1]] * gamma
        return tokens, torch.nn.functional.one_hot(torch.tensor(tokens, dtype=torch.long), self.vocab_size).float()


def test_greedy_with_a_drafter_object(byte_pair, greedy_refs):
    target, _ = byte_pair
    for prompt in PROMPTS[:5]:
        res = ms.speculative_generate(target, RepeatLastDrafter(256), ms.encode(prompt), 24, gamma=3)
        assert res.tokens == greedy_refs[prompt]


def test_steps_and_stats_are_consistent(byte_pair):
    target, draft = byte_pair
    gamma = 4
    res = ms.speculative_generate(target, draft, ms.encode("def f(x):"), 40, gamma=gamma)
    emitted = [t for s in res.steps for t in s.drafted[:s.accepted] + [s.token]]
    assert emitted == res.tokens
    assert all(len(s.drafted) <= gamma and 0 <= s.accepted <= len(s.drafted) for s in res.steps)
    drafted = sum(len(s.drafted) for s in res.steps)
    st = res.stats
    assert st["target_calls"] == len(res.steps)
    assert st["draft_calls"] == drafted  # a model draft makes one call per drafted token
    assert st["acceptance_rate"] == pytest.approx(sum(s.accepted for s in res.steps) / drafted)
    assert st["tokens_per_call"] == pytest.approx(len(res.tokens) / len(res.steps))
    assert st["wall_time"] > 0
    plain = ms.generate(target, ms.encode("def f(x):"), 40)
    assert plain.stats["target_calls"] == 40 and plain.steps == []


@pytest.mark.skipif(not all((WEIGHTS_DIR / f"{n}.pt").exists() for n in ("target", "draft")),
                    reason="shipped weights not present")
def test_greedy_equality_on_shipped_models():
    target, draft = ms.load_model("target"), ms.load_model("draft")
    for prompt in ["def fib(n):", "import ", "class Foo:\n    def __init__(self"]:
        ids = ms.encode(prompt)
        ref = ms.generate(target, ids, 32).tokens
        for gamma in (1, 4, 8):
            assert ms.speculative_generate(target, draft, ids, 32, gamma=gamma).tokens == ref


# --- sampling: the output is distributed exactly as plain sampling from the target ---------------

@pytest.fixture(scope="module")
def tiny_pair(random_gpt):
    """Vocabulary 3: the target's law over 3 new tokens has only 27 outcomes, computable exactly."""
    cfg = dict(vocab_size=3, n_layer=1, n_head=1, n_embd=8, block_size=16, std=0.5)
    return random_gpt(seed=0, **cfg), random_gpt(seed=1, **cfg)


@pytest.fixture(scope="module")
def topk_pair(random_gpt):
    """Vocabulary 5 with top_k=2: 8 outcomes over 3 tokens, and top-k drops much of the draft's mass,
    so drafting from the filtered q but reporting the raw one shows up clearly."""
    cfg = dict(vocab_size=5, n_layer=1, n_head=1, n_embd=8, block_size=16, std=0.3)
    return random_gpt(seed=0, **cfg), random_gpt(seed=1, **cfg)


def exact_continuations(model, prompt, m, temperature=1.0, top_k=None, top_p=None):
    """{continuation: probability}: every sequence of m tokens, weighted by the warped target law
    ms.probs(target logits) at each step (plain autoregressive sampling, enumerated)."""
    dist = {(): 1.0}
    with torch.no_grad():
        for _ in range(m):
            seqs = list(dist)
            logits = model(torch.tensor([list(prompt) + list(s) for s in seqs]))[:, -1]  # (n, V)
            rows = ms.probs(logits, temperature, top_k, top_p).double()
            rows = rows / rows.sum(-1, keepdim=True)
            dist = {s + (t,): dist[s] * float(r[t]) for s, r in zip(seqs, rows) for t in range(len(r)) if r[t] > 0}
    return dist


def continuation_pvalue(outputs, dist, chi2_pvalue):
    tally = collections.Counter(tuple(o) for o in outputs)
    keys = sorted(set(dist) | set(tally))
    return chi2_pvalue(torch.tensor([tally[k] for k in keys]), torch.tensor([dist.get(k, 0.0) for k in keys]))


N_SEEDS = 300  # ~5 ms of CPU per run; the lossy decoders below give p < 1e-20 with half as many
PROMPT = [0, 1]


def sampled(target, draft, n=N_SEEDS, m=3, **kw):
    """The continuations speculative_generate returns for seeds 0..n-1."""
    return [ms.speculative_generate(target, draft, PROMPT, m, seed=s, **kw).tokens for s in range(n)]


def test_exact_enumeration_is_a_distribution(tiny_pair, topk_pair):
    target, _ = tiny_pair
    for kw in ({}, dict(top_k=2), dict(top_p=0.8), dict(temperature=0.7)):
        dist = exact_continuations(target, PROMPT, 3, **kw)
        assert abs(sum(dist.values()) - 1) < 1e-9
        assert len(dist) <= 27
    assert len(exact_continuations(topk_pair[0], PROMPT, 3, top_k=2)) == 8  # top-2 of 5, three times


def test_plain_sampling_matches_enumeration(tiny_pair, chi2_pvalue):
    """Sanity check of the reference itself: generate(temperature=1) follows the enumeration."""
    target, _ = tiny_pair
    outs = [ms.generate(target, PROMPT, 3, temperature=1.0, seed=s).tokens for s in range(N_SEEDS)]
    assert continuation_pvalue(outs, exact_continuations(target, PROMPT, 3), chi2_pvalue) > 1e-4


SETTINGS = {  # name: (pair fixture, sampling kwargs); with 3 new tokens a round drafts at most 2
    "plain": ("tiny_pair", dict(temperature=1.0, gamma=2)),
    "gamma_1_top_p": ("tiny_pair", dict(temperature=0.7, top_p=0.8, gamma=1)),
    "top_k": ("topk_pair", dict(temperature=1.0, top_k=2, gamma=2)),
}


@pytest.mark.parametrize("setting", SETTINGS)
def test_speculative_sampling_is_lossless(request, chi2_pvalue, setting):
    pair, kw = SETTINGS[setting]
    target, draft = request.getfixturevalue(pair)
    kw = dict(kw)
    gamma = kw.pop("gamma")
    outs = sampled(target, draft, gamma=gamma, **kw)
    assert continuation_pvalue(outs, exact_continuations(target, PROMPT, 3, **kw), chi2_pvalue) > 1e-4
    assert len({len(o) for o in outs}) == 1  # always exactly 3 tokens


def test_speculative_sampling_with_deterministic_drafter_is_lossless(tiny_pair, chi2_pvalue):
    """One-hot q (a deterministic drafter): kept with probability p(x), exact all the same."""
    target, _ = tiny_pair
    outs = sampled(target, RepeatLastDrafter(3), temperature=1.0, gamma=2)
    assert continuation_pvalue(outs, exact_continuations(target, PROMPT, 3), chi2_pvalue) > 1e-4


# Negative controls: the same enumeration + chi-square check must flag lossy decoders.

def always_accept(draft_tokens, q, p, generator=None):
    """Keep every draft, then a bonus from p."""
    return len(draft_tokens), ms.sample(p[-1], generator)


def threshold_accept(draft_tokens, q, p, generator=None, tau=0.1):
    """The survey's threshold rule: keep x if p(x) >= tau, else sample from p."""
    for i, x in enumerate(draft_tokens):
        if p[i, x] < tau:
            return i, ms.sample(p[i], generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


class GreedyDraftSoftQ(ms.ModelDrafter):
    """Draft token = argmax q, but the q reported is the soft distribution."""

    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        tokens, _ = super().propose(context, gamma, 0.0, top_k, top_p, generator)
        logits = self.model(torch.tensor([list(context) + tokens]))[0, len(context) - 1:len(context) - 1 + len(tokens)]
        return tokens, ms.probs(logits, temperature, top_k, top_p)


class FilteredDraftRawQ(ms.ModelDrafter):
    """Draft token drawn from the top-k/top-p filtered q, but the q reported is the unfiltered one."""

    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        tokens, _ = super().propose(context, gamma, temperature, top_k, top_p, generator)
        logits = self.model(torch.tensor([list(context) + tokens]))[0, len(context) - 1:len(context) - 1 + len(tokens)]
        return tokens, ms.probs(logits, temperature)


@pytest.mark.parametrize("control", ["always_accept", "threshold", "greedy_draft_soft_q", "filtered_draft_raw_q"])
def test_lossy_decoders_are_detected(request, chi2_pvalue, monkeypatch, control):
    pair, kw = SETTINGS["top_k" if control == "filtered_draft_raw_q" else "plain"]
    target, draft = request.getfixturevalue(pair)
    kw = dict(kw)
    gamma = kw.pop("gamma")
    decode_module = sys.modules[ms.speculative_generate.__module__]  # where the rule is looked up
    if control == "always_accept":
        monkeypatch.setattr(decode_module, "speculative_accept", always_accept)
    elif control == "threshold":
        monkeypatch.setattr(decode_module, "speculative_accept", threshold_accept)
    elif control == "greedy_draft_soft_q":
        draft = GreedyDraftSoftQ(draft)
    else:
        draft = FilteredDraftRawQ(draft)
    outs = sampled(target, draft, n=150, gamma=gamma, **kw)
    assert continuation_pvalue(outs, exact_continuations(target, PROMPT, 3, **kw), chi2_pvalue) < 1e-6


def test_draft_equal_to_target_keeps_every_draft(byte_pair):
    """p == q at temperature > 0: min(1, p/q) = 1, every drafted token is kept."""
    target, _ = byte_pair
    for seed in range(3):
        res = ms.speculative_generate(target, copy.deepcopy(target), ms.encode("def "), 20, gamma=4,
                                      temperature=1.0, seed=seed)
        assert res.stats["acceptance_rate"] == 1.0 and len(res.tokens) == 20


def test_last_token_needs_no_draft_when_sampling(byte_pair):
    """Regression: with one token left the round drafts nothing; at temperature > 0 this used to
    crash (q was None and got sliced). max_new_tokens=1 is that round alone."""
    target, draft = byte_pair
    for seed in range(3):
        res = ms.speculative_generate(target, draft, ms.encode("def "), 1, gamma=4, temperature=1.0, seed=seed)
        assert len(res.tokens) == 1 and res.steps[0].drafted == [] and res.steps[0].accepted == 0


def test_sampling_is_deterministic_given_the_seed(byte_pair):
    target, draft = byte_pair
    kw = dict(max_new_tokens=20, gamma=3, temperature=0.8, top_k=20, top_p=0.9)
    a = ms.speculative_generate(target, draft, ms.encode("def "), seed=5, **kw)
    b = ms.speculative_generate(target, draft, ms.encode("def "), seed=5, **kw)
    assert a.tokens == b.tokens and [s.drafted for s in a.steps] == [s.drafted for s in b.steps]
    others = {tuple(ms.speculative_generate(target, draft, ms.encode("def "), seed=s, **kw).tokens)
              for s in range(6, 10)}
    assert others - {tuple(a.tokens)}  # the seed matters


def test_generate_sampling_is_deterministic_given_the_seed(byte_pair):
    target, _ = byte_pair
    kw = dict(max_new_tokens=20, temperature=0.8, top_k=20, top_p=0.9)
    a = ms.generate(target, ms.encode("def "), seed=5, **kw).tokens
    assert a == ms.generate(target, ms.encode("def "), seed=5, **kw).tokens
    assert {tuple(ms.generate(target, ms.encode("def "), seed=s, **kw).tokens) for s in range(6, 10)} - {tuple(a)}


# --- edge cases ---------------------------------------------------------------------------------

@pytest.mark.parametrize("max_new", [1, 2, 3, 5, 17])
@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_exactly_max_new_tokens_greedy(byte_pair, max_new, gamma):
    """Including max_new_tokens < gamma: the last round drafts only what still fits."""
    target, draft = byte_pair
    ids = ms.encode("def f(x):")
    res = ms.speculative_generate(target, draft, ids, max_new, gamma=gamma)
    assert len(res.tokens) == max_new
    assert res.tokens == ms.generate(target, ids, max_new).tokens
    assert all(len(s.drafted) <= min(gamma, max_new - 1) for s in res.steps)


@pytest.mark.parametrize("max_new", [1, 2, 5, 17])
def test_exactly_max_new_tokens_sampled(byte_pair, max_new):
    target, draft = byte_pair
    ids = ms.encode("def f(x):")
    assert len(ms.generate(target, ids, max_new, temperature=1.0).tokens) == max_new
    for seed in range(3):
        assert len(ms.speculative_generate(target, draft, ids, max_new, gamma=4, temperature=1.0,
                                           seed=seed).tokens) == max_new


def test_single_byte_prompt(byte_pair):
    target, draft = byte_pair
    ref = ms.generate(target, [120], 16).tokens
    assert len(ref) == 16
    assert ms.speculative_generate(target, draft, [120], 16, gamma=4).tokens == ref
    assert ms.speculative_generate(target, draft, torch.tensor([[120]]), 16, gamma=4).tokens == ref  # tensor ids


@pytest.mark.parametrize("gamma", [8, 20])
def test_gamma_larger_than_room_left(random_gpt, gamma):
    """block_size 16, prompt 10, 6 new tokens: a round can never draft past the block."""
    target = random_gpt(block_size=16, seed=3)
    draft = random_gpt(block_size=16, n_layer=1, seed=4)
    ids = list(range(65, 75))
    res = ms.speculative_generate(target, draft, ids, 6, gamma=gamma)
    assert res.tokens == ms.generate(target, ids, 6).tokens and len(res.tokens) == 6


def test_eos_inside_an_accepted_block(byte_pair):
    """Pick, from a full run, a token first emitted in the middle of a round's block; with it as
    eos_token, both decoders stop right after it, although that round produced more tokens."""
    target, draft = byte_pair
    for prompt in PROMPTS:
        ids = ms.encode(prompt)
        full = ms.speculative_generate(target, draft, ids, 24, gamma=4)
        pos = 0
        for s in full.steps:
            block = s.drafted[:s.accepted] + [s.token]
            for j, tok in enumerate(block[:-1]):  # not the block's last token
                if tok not in full.tokens[:pos + j]:
                    eos, idx = tok, pos + j
                    break
            else:
                pos += len(block)
                continue
            break
        else:
            continue
        res = ms.speculative_generate(target, draft, ids, 24, gamma=4, eos_token=eos)
        assert res.tokens == full.tokens[:idx + 1]
        assert sum(s.accepted + 1 for s in res.steps) > len(res.tokens)  # the block was cut
        assert ms.generate(target, ids, 24, eos_token=eos).tokens == full.tokens[:idx + 1]
        return
    pytest.fail("no prompt produced a token first seen mid-block; the test needs another prompt")


def test_eos_not_emitted_changes_nothing(byte_pair, greedy_refs):
    target, draft = byte_pair
    prompt = PROMPTS[0]
    unused = next(t for t in range(256) if t not in greedy_refs[prompt])
    res = ms.speculative_generate(target, draft, ms.encode(prompt), 24, gamma=3, eos_token=unused)
    assert res.tokens == greedy_refs[prompt]


def test_crop_prompt_keeps_the_end(random_gpt):
    target, draft = random_gpt(block_size=16, seed=3), random_gpt(block_size=16, n_layer=1, seed=4)
    ids = list(range(60, 80))  # 20 tokens > block_size 16
    with pytest.raises(ValueError, match="block_size"):
        ms.generate(target, ids, 4)
    with pytest.raises(ValueError, match="block_size"):
        ms.speculative_generate(target, draft, ids, 4)
    ref = ms.generate(target, ids[-12:], 4).tokens
    assert ms.generate(target, ids, 4, crop_prompt=True).tokens == ref
    assert ms.speculative_generate(target, draft, ids, 4, gamma=3, crop_prompt=True).tokens == ref


# --- bad input: a ValueError that names the problem ---------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(ids=[]), "empty"),
    (dict(ids="def f"), "token ids"),
    (dict(ids=list(range(60))), "block_size"),
    (dict(gamma=0), "gamma"),
    (dict(gamma=-2), "gamma"),
    (dict(temperature=-0.5), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_k=0), "top_k"),
    (dict(ids=[300]), r"\[0, 256\)"),
])
def test_bad_input_raises_value_error(byte_pair, kwargs, match):
    target, draft = byte_pair
    call = dict(ids=[1, 2, 3], max_new_tokens=8)
    call.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ms.speculative_generate(target, draft, **call)
    if "gamma" not in kwargs:
        with pytest.raises(ValueError, match=match):
            ms.generate(target, **call)


def test_vocab_mismatch_raises(byte_pair, random_gpt):
    target, _ = byte_pair
    with pytest.raises(ValueError, match="vocab"):
        ms.speculative_generate(target, random_gpt(vocab_size=100, n_layer=1), [1, 2], 4)


def test_draft_of_wrong_type_raises(byte_pair):
    target, _ = byte_pair
    with pytest.raises(ValueError, match="Drafter"):
        ms.speculative_generate(target, "draft", [1, 2], 4)
