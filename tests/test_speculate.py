"""generate and THE speculative loop (minispec.speculate): greedy equality, exact losslessness,
records, edge cases.

Sampling is checked two ways against the target's own law of its next few tokens (the target alone,
every sequence over a tiny vocabulary enumerated): exactly, with the loop's random draws enumerated
(conftest.exact_law), on float64 models; and by chi-square over fixed seeds, on float32 models. The
same checks must flag four lossy decoders (negative controls).
"""
import collections
import copy

import pytest
import torch

import minispec as ms
from minispec.kit.viz import drafted

PROMPTS = ["def f(x):", "x", "import os\n", "class A:\n    ", "    return", "for i in range(10):",
           "\xe9t\xe9 \u2603", "#!", "while True:\n        pass", "a = [1, 2, 3]; b = a[::-1]"]


@pytest.fixture(scope="module")
def greedy_refs(byte_pair):
    """Plain greedy decoding of every prompt: the reference speculative decoding must reproduce."""
    target, _ = byte_pair
    return {p: ms.generate(target, ms.encode(p), 24).tokens for p in PROMPTS}


# --- greedy: speculative decoding returns the target's own greedy text ---------------------------

@pytest.mark.parametrize("gamma", [1, 2, 3, 5, 8])
def test_greedy_speculative_equals_generate(byte_pair, greedy_refs, gamma):
    target, draft = byte_pair
    accepted = collections.Counter()
    for prompt in PROMPTS:
        res = ms.speculative_generate(target, draft, ms.encode(prompt), 24, gamma=gamma)
        assert res.tokens == greedy_refs[prompt], prompt
        accepted.update(s.accepted for s in res.steps)
    # rejections and acceptances happened
    assert accepted[0] and sum(accepted.values()) > accepted[0]


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_ignores_top_k_top_p(byte_pair, greedy_refs, gamma):
    target, draft = byte_pair
    for prompt in PROMPTS[:4]:
        res = ms.speculative_generate(target, draft, ms.encode(prompt), 24, gamma=gamma, top_k=5,
                                      top_p=0.7)
        assert res.tokens == greedy_refs[prompt]
        plain = ms.generate(target, ms.encode(prompt), 24, top_k=5, top_p=0.7)
        assert plain.tokens == greedy_refs[prompt]


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
                assert all(s.bonus for s in res.steps) and res.stats.kept_fraction == 1.0
            else:
                assert res.stats.kept_fraction < 0.5


class RepeatLast(ms.Drafter):
    """A stateless deterministic drafter (like prompt lookup): guess the last token again, gamma
    times."""

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        n = gamma if depth is None else min(gamma, depth)
        return ms.Tree.chain([context[-1]] * n)  # q None: deterministic guesses


def test_greedy_with_a_drafter_object(byte_pair, greedy_refs):
    target, _ = byte_pair
    for prompt in PROMPTS[:5]:
        res = ms.speculative_generate(target, RepeatLast(), ms.encode(prompt), 24, gamma=3)
        assert res.tokens == greedy_refs[prompt]


def test_steps_rebuild_the_output(byte_pair):
    target, draft = byte_pair
    for temperature in (0.0, 1.0):
        res = ms.speculative_generate(target, draft, ms.encode("def f(x):"), 40, gamma=4,
                                      temperature=temperature)
        emitted = [t for s in res.steps for t in [s.tree.tokens[i] for i in s.path] + [s.token]]
        assert emitted == res.tokens
        for s in res.steps:
            assert len(s.path) <= len(s.tree.tokens) <= 4
            # a chain: drafted = its tokens
            assert drafted(s)[:s.accepted] == [s.tree.tokens[i] for i in s.path]
            assert drafted(s) == s.tree.tokens
            assert s.bonus == (len(s.tree.tokens) > 0 and s.accepted == len(s.tree.tokens))


def count_calls(module):
    """A list whose length counts the calls of `module` from now on."""
    calls = []
    module.register_forward_hook(lambda *_: calls.append(1))
    return calls


def test_stats_count_what_happened(byte_pair):
    """Stats against independent counts: target calls = passes through the target's last block;
    draft calls = passes through the draft's block, one per drafted token of a chain; every call
    adds one token of the target's own, so the kept drafts are the other len(tokens) - target_calls
    tokens."""
    target, draft = copy.deepcopy(byte_pair[0]), copy.deepcopy(byte_pair[1])
    target_calls, draft_calls = count_calls(target.h[-1]), count_calls(draft.h[0])
    res = ms.speculative_generate(target, draft, ms.encode("def f(x):"), 40, gamma=4)
    st = res.stats
    assert st.target_calls == len(target_calls)
    assert st.draft_calls == len(draft_calls) == st.drafted > 0
    assert st.kept_fraction == pytest.approx((40 - len(target_calls)) / len(draft_calls))
    assert st.tokens_per_call == pytest.approx(40 / len(target_calls))
    assert st.wall_time > 0 and st.tokens_per_second == pytest.approx(40 / st.wall_time)
    target_calls.clear()
    plain = ms.generate(target, ms.encode("def f(x):"), 40)
    assert plain.stats.target_calls == len(target_calls) == 40 and plain.steps == []


# --- sampling: the output is distributed exactly as plain sampling from the target ---------------

PROMPT = [0, 1]


@pytest.fixture(scope="module")
def pair64(tiny_pair):
    return tuple(copy.deepcopy(m).double() for m in tiny_pair)


@pytest.fixture(scope="module")
def topk_pair(random_gpt):
    """Vocabulary 5, flat-ish (std 0.3): top_k=2 and top_p=0.7 drop much of the draft's mass (and
    leave the target several tokens), so drafting from the filtered q but reporting the raw one
    shows up clearly."""
    cfg = dict(vocab_size=5, n_layer=1, n_head=1, n_embd=8, block_size=16, std=0.3)
    return random_gpt(seed=0, **cfg), random_gpt(seed=1, **cfg)


SETTINGS = {  # name: (pair, sampling kwargs, gamma); with 3 new tokens a round drafts at most 2
    "plain": ("tiny", dict(temperature=1.0), 2),
    # (on tiny_pair this top-p leaves the target ONE token wherever a draft is verified: a one-hot
    # p makes any q lossless, so this setting checks that verification warps p as generate does,
    # and "top_p" below is the setting that tests a top-p draft's q)
    "gamma_1_top_p": ("tiny", dict(temperature=0.7, top_p=0.8), 1),
    "top_k": ("topk", dict(temperature=1.0, top_k=2), 2),
    "top_p": ("topk", dict(temperature=1.0, top_p=0.7), 2),
}


def pair_for(name, request, dtype=torch.float32):
    pair = request.getfixturevalue("tiny_pair" if name == "tiny" else "topk_pair")
    return pair if dtype == torch.float32 else tuple(copy.deepcopy(m).double() for m in pair)


def spec_law(exact_law, dense, target, drafter, m=3, **kw):
    def run():
        return tuple(ms.speculative_generate(target, drafter, PROMPT, m, **kw).tokens)

    return dense(exact_law(run), target.config.vocab_size, m)


def tv(a, b):
    return 0.5 * float((a - b).abs().sum())


def test_generate_exact_law_is_the_target(tiny_pair, exact_law, dense, target_law):
    """The reference itself: generate's own draws, enumerated, give the enumerated target law."""
    target, _ = tiny_pair
    for kw in (dict(temperature=1.0), dict(temperature=0.7, top_p=0.8),
               dict(temperature=1.3, top_k=2)):
        law = dense(exact_law(lambda: tuple(ms.generate(target, PROMPT, 3, **kw).tokens)), 3, 3)
        assert torch.allclose(law, target_law(target, PROMPT, 3, **kw), atol=1e-6, rtol=0)


@pytest.mark.parametrize("setting", SETTINGS)
def test_speculative_sampling_exact_law_float64(request, exact_law, dense, target_law, setting):
    """float64 models: the loop's exact law equals the target's to 1e-12."""
    name, kw, gamma = SETTINGS[setting]
    target, draft = pair_for(name, request, torch.float64)
    law = spec_law(exact_law, dense, target, draft, gamma=gamma, **kw)
    assert torch.allclose(law, target_law(target, PROMPT, 3, **kw), atol=1e-12, rtol=0)


@pytest.mark.parametrize("setting", SETTINGS)
def test_speculative_sampling_chi_square(request, chi2_pvalue, target_law, setting):
    name, kw, gamma = SETTINGS[setting]
    target, draft = pair_for(name, request)
    V = target.config.vocab_size
    counts = torch.zeros(V, V, V)
    for seed in range(300):
        res = ms.speculative_generate(target, draft, PROMPT, 3, gamma=gamma, seed=seed, **kw)
        counts[tuple(res.tokens)] += 1
    assert chi2_pvalue(counts, target_law(target, PROMPT, 3, **kw)) > 1e-4


def test_deterministic_drafter_is_lossless(pair64, exact_law, dense, target_law):
    """Guesses with q None: verification draws x ~ p and keeps the guess if x equals it; exact all
    the same."""
    target, _ = pair64
    law = spec_law(exact_law, dense, target, RepeatLast(), gamma=2, temperature=1.0)
    assert torch.allclose(law, target_law(target, PROMPT, 3), atol=1e-12, rtol=0)


# Negative controls: the same exact and chi-square checks must flag lossy decoders.

def always_accept(candidates, q, p, generator=None):
    """Keep the first candidate, whatever p says."""
    return candidates[0]


def threshold_accept(candidates, q, p, generator=None, tau=0.3):
    """The survey's threshold rule: keep the candidate if p(x) >= tau, else sample from p."""
    return candidates[0] if p[candidates[0]] >= tau else ms.sample(p, generator)


class GreedyDraftSoftQ(ms.ModelDrafter):
    """Draft token = argmax q, but the q reported is the soft distribution."""

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        tree = super().draft(context, gamma, 0.0, top_k, top_p, generator, depth)
        return soft_q(self.model, context, tree, temperature)


class FilteredDraftRawQ(ms.ModelDrafter):
    """Draft token drawn from the top-k/top-p filtered q, but the q reported is the unfiltered
    one."""

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        tree = super().draft(context, gamma, temperature, top_k, top_p, generator, depth)
        return soft_q(self.model, context, tree, temperature)


@torch.no_grad()
def soft_q(model, context, chain, temperature):
    """The chain, its q replaced by the draft's plain (temperature only) softmax after each
    prefix."""
    n, c = len(chain.tokens), len(context)
    logits = model(torch.tensor([list(context) + chain.tokens]))[0, c - 1:c - 1 + n]
    return ms.Tree.chain(chain.tokens, list(ms.probs(logits, temperature)))


CONTROLS = {  # name: (setting, how)
    "always_accept": ("plain", dict(rule=always_accept)),
    "threshold": ("plain", dict(rule=threshold_accept)),
    "greedy_draft_soft_q": ("plain", dict(drafter=GreedyDraftSoftQ)),
    "filtered_draft_raw_q": ("top_k", dict(drafter=FilteredDraftRawQ)),
    "filtered_draft_raw_q_top_p": ("top_p", dict(drafter=FilteredDraftRawQ)),
}


@pytest.mark.parametrize("control", CONTROLS)
def test_lossy_decoders_are_detected(request, exact_law, dense, target_law, chi2_pvalue, control):
    setting, how = CONTROLS[control]
    name, kw, gamma = SETTINGS[setting]
    target, draft = pair_for(name, request)
    drafter = how.get("drafter", ms.ModelDrafter)(draft)
    rule = dict(rule=how["rule"]) if "rule" in how else {}
    want = target_law(target, PROMPT, 3, **kw)
    law = spec_law(exact_law, dense, target, drafter, gamma=gamma, **kw, **rule)
    assert tv(law, want) > 0.05  # the exact check flags it ...
    V = target.config.vocab_size
    counts = torch.zeros(V, V, V)
    for seed in range(500):
        res = ms.speculative_generate(target, drafter, PROMPT, 3, gamma=gamma, seed=seed, **kw,
                                      **rule)
        counts[tuple(res.tokens)] += 1
    assert chi2_pvalue(counts, want) < 1e-6  # ... and so does the chi-square


def no_residual(candidates, q, p, generator=None):
    """Keep x with min(1, p(x) / q(x)), but after a rejection sample from p itself, not from the
    residual norm(max(0, p - q)): the classic bug, which over-samples what the draft proposed."""
    for x in candidates:
        if torch.rand((), generator=generator) < ms.accept_prob(p[x], q[x]):
            return x
    return ms.sample(p, generator)


def test_a_missing_residual_is_detected(request, exact_law, dense, target_law, chi2_pvalue):
    """Subtler than the controls above: here it moves the law by a total variation of about 0.05,
    which 300 or 500 runs do not reliably see. The exact law sees it; a chi-square needs about
    3,000 runs, and the package's rule passes the same chi-square at the same count."""
    _, kw, gamma = SETTINGS["plain"]
    target, draft = pair_for("tiny", request)
    drafter, want = ms.ModelDrafter(draft), target_law(target, PROMPT, 3, **kw)
    law = spec_law(exact_law, dense, target, drafter, gamma=gamma, rule=no_residual, **kw)
    assert tv(law, want) > 0.03
    for rule in (ms.verify.multi_draft_accept, no_residual):
        counts = torch.zeros(3, 3, 3)
        for seed in range(3000):
            res = ms.speculative_generate(target, drafter, PROMPT, 3, gamma=gamma, seed=seed,
                                          rule=rule, **kw)
            counts[tuple(res.tokens)] += 1
        pvalue = chi2_pvalue(counts, want)
        assert pvalue > 1e-4 if rule is not no_residual else pvalue < 1e-6


def test_top_p_setting_catches_a_filtered_draft_with_raw_q(request, exact_law, dense, target_law):
    """Review finding: against a one-hot p any q is lossless, so a top-p setting must leave the
    target at least two tokens where a draft is verified. Here the first round always verifies
    its first draft after PROMPT; there the warped target keeps >= 2 tokens and top-p really cuts
    the draft's q. A drafter that draws from the warped q but reports the raw one then moves the
    exact law (measured: total variation 0.123 from the target's), while the package's
    ModelDrafter matches it (float64)."""
    _, kw, gamma = SETTINGS["top_p"]
    target, draft = pair_for("topk", request, torch.float64)
    with torch.no_grad():
        p = ms.probs(target(torch.tensor([PROMPT]))[0, -1], **kw)
        logits = draft(torch.tensor([PROMPT]))[0, -1]
    assert int((p > 0).sum()) >= 2  # not degenerate: p is not one-hot where a draft is verified
    q_warped, q_raw = ms.probs(logits, **kw), ms.probs(logits, kw["temperature"])
    assert float(q_raw[q_warped == 0].sum()) > 0.1  # top-p drops real mass from the draft's q
    want = target_law(target, PROMPT, 3, **kw)
    lossy = spec_law(exact_law, dense, target, FilteredDraftRawQ(draft), gamma=gamma, **kw)
    assert tv(lossy, want) > 0.1
    right = spec_law(exact_law, dense, target, ms.ModelDrafter(draft), gamma=gamma, **kw)
    assert torch.allclose(right, want, atol=1e-9, rtol=0)


def test_draft_equal_to_target_keeps_every_draft(byte_pair):
    """p == q at temperature > 0: min(1, p/q) = 1, every drafted token is kept."""
    target, _ = byte_pair
    for seed in range(3):
        res = ms.speculative_generate(target, copy.deepcopy(target), ms.encode("def "), 20, gamma=4,
                                      temperature=1.0, seed=seed)
        assert res.stats.kept_fraction == 1.0 and len(res.tokens) == 20


def test_last_token_needs_no_draft_when_sampling(byte_pair):
    """With one token left a round drafts nothing (max_new_tokens=1 is that round alone)."""
    target, draft = byte_pair
    for seed in range(3):
        res = ms.speculative_generate(target, draft, ms.encode("def "), 1, gamma=4,
                                      temperature=1.0, seed=seed)
        assert len(res.tokens) == 1 and res.steps[0].tree.tokens == []
        assert res.steps[0].accepted == 0


def test_sampling_is_deterministic_given_the_seed(byte_pair):
    target, draft = byte_pair
    kw = dict(max_new_tokens=20, gamma=3, temperature=0.8, top_k=20, top_p=0.9)
    a = ms.speculative_generate(target, draft, ms.encode("def "), seed=5, **kw)
    b = ms.speculative_generate(target, draft, ms.encode("def "), seed=5, **kw)
    assert a.tokens == b.tokens and [drafted(s) for s in a.steps] == [drafted(s) for s in b.steps]
    others = {tuple(ms.speculative_generate(target, draft, ms.encode("def "), seed=s, **kw).tokens)
              for s in range(6, 10)}
    assert others - {tuple(a.tokens)}  # the seed matters
    kw.pop("gamma")
    a = ms.generate(target, ms.encode("def "), seed=5, **kw).tokens
    assert a == ms.generate(target, ms.encode("def "), seed=5, **kw).tokens
    others = {tuple(ms.generate(target, ms.encode("def "), seed=s, **kw).tokens)
              for s in range(6, 10)}
    assert others - {tuple(a)}


# --- float64: device and dtype follow the model ---------------------------------------------------

def test_float64_models_decode_greedy_equal(byte_pair, greedy_refs):
    """model.double() decodes, and greedily equals generate. float64 is the strict test: in float32
    a one-token and a many-token forward round differently (another summation order), so two logits
    within ~1e-6 of each other could swap places between generate and the loop's one-pass
    scoring."""
    target, draft = (copy.deepcopy(m).double() for m in byte_pair)
    for prompt in PROMPTS[:4]:
        ids = ms.encode(prompt)
        ref = ms.generate(target, ids, 24).tokens
        assert ref == greedy_refs[prompt]  # (these weights have no near-ties)
        for d in (draft, byte_pair[1]):  # a float64 draft, and a float32 draft for a float64 target
            assert ms.speculative_generate(target, d, ids, 24, gamma=4).tokens == ref
    res = ms.speculative_generate(target, draft, ms.encode("def "), 8, gamma=3, temperature=1.0)
    assert len(res.tokens) == 8 and res.steps[0].tree.q[-1].dtype == torch.float64


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
    made = 0
    for s in res.steps:
        assert len(s.tree.tokens) == min(gamma, max_new - made - 1)
        made += s.accepted + 1


@pytest.mark.parametrize("max_new", [1, 2, 5, 17])
def test_exactly_max_new_tokens_sampled(byte_pair, max_new):
    target, draft = byte_pair
    ids = ms.encode("def f(x):")
    assert len(ms.generate(target, ids, max_new, temperature=1.0).tokens) == max_new
    for seed in range(3):
        assert len(ms.speculative_generate(target, draft, ids, max_new, gamma=4, temperature=1.0,
                                           seed=seed).tokens) == max_new


def test_single_token_prompt_and_tensor_ids(byte_pair):
    target, draft = byte_pair
    ref = ms.generate(target, [120], 16).tokens
    assert len(ref) == 16
    assert ms.speculative_generate(target, draft, [120], 16, gamma=4).tokens == ref
    assert ms.speculative_generate(target, draft, torch.tensor([[120]]), 16, gamma=4).tokens == ref
    assert ms.generate(target, torch.tensor([120]), 16).tokens == ref


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
    eos_token, both decoders stop right after it, although that round produced more tokens: its
    Step ends at the eos (the drafts after it are not counted as kept)."""
    target, draft = byte_pair
    for prompt in PROMPTS:
        ids = ms.encode(prompt)
        full = ms.speculative_generate(target, draft, ids, 24, gamma=4)
        pos = 0
        for s in full.steps:
            block = drafted(s)[:s.accepted] + [s.token]
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
        last = res.steps[-1]  # the round kept the eos as a draft and went on: cut at the eos
        assert last.token == eos and drafted(last)[last.accepted] == eos
        assert sum(s.accepted + 1 for s in res.steps) == len(res.tokens)
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
    (dict(ids=[]), "prompt is empty"),
    (dict(ids="def f"), "token ids"),
    (dict(ids=list(range(60))), "block_size"),
    (dict(ids=[300]), r"each token id must be an integer in \[0, 256\)"),
    (dict(ids=[-1]), r"each token id must be an integer in \[0, 256\)"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=2.5), "max_new_tokens"),
    (dict(max_new_tokens=64), "max_new_tokens"),
    (dict(gamma=0), "gamma"),
    (dict(gamma=-2), "gamma"),
    (dict(gamma=2.5), "gamma"),
    (dict(gamma=True), "gamma"),
    (dict(gamma="4"), "gamma"),
    (dict(temperature=-0.5), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_k=0), "top_k"),
    (dict(top_k=2.5), "top_k"),
    (dict(eos_token=256), "eos_token"),
    (dict(eos_token=1.5), "eos_token"),
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
    other = random_gpt(vocab_size=100, n_layer=1)
    for drafter in (other, ms.ModelDrafter(other)):
        with pytest.raises(ValueError, match="vocab"):
            ms.speculative_generate(target, drafter, [1, 2], 4)


def test_draft_of_wrong_type_raises(byte_pair):
    target, _ = byte_pair
    with pytest.raises(ValueError, match="Drafter"):
        ms.speculative_generate(target, "draft", [1, 2], 4)
