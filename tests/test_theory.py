"""Closed forms of speculative decoding, checked against direct sums, known answers and
simulation."""
import pytest
import torch

import minispec as ms

ALPHAS = [0.0, 0.3, 0.5, 0.8, 0.99, 1.0]
GAMMAS = [1, 2, 5, 10]


def truncated_geometric(alpha, gamma):
    """P(n drafts kept), n = 0..gamma, from its definition: the first n are kept (alpha each), then
    one is rejected (1 - alpha) — unless n == gamma, where there is nothing left to reject."""
    return [alpha ** n * ((1 - alpha) if n < gamma else 1.0) for n in range(gamma + 1)]


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_expected_tokens_is_the_mean_of_the_truncated_geometric(alpha, gamma):
    pmf = truncated_geometric(alpha, gamma)
    assert sum(pmf) == pytest.approx(1.0)
    direct = sum((n + 1) * pn for n, pn in enumerate(pmf))  # n kept drafts + the target's token
    assert ms.expected_tokens(alpha, gamma) == pytest.approx(direct, rel=1e-12)
    assert ms.accepted_pmf(alpha, gamma) == pytest.approx(pmf, rel=1e-12, abs=1e-15)


def test_expected_tokens_and_speedup_take_a_tensor_of_alphas():
    """A tensor of alphas (a curve to plot) gives the same values as one number at a time,
    alpha = 1 included."""
    alphas = torch.tensor([0.0, 0.3, 0.9, 1.0], dtype=torch.float64)
    for f in (lambda a: ms.expected_tokens(a, 4), lambda a: ms.speedup(a, 4, 0.1, 1.2)):
        got = f(alphas)
        assert got.shape == (4,)
        assert got.tolist() == pytest.approx([f(float(a)) for a in alphas], rel=1e-12)


def test_expected_tokens_known_answers():
    """alpha 0: only the target's token (1); alpha 1: all gamma drafts + bonus (gamma + 1);
    alpha 0.5, gamma 2: 1 + 0.5 + 0.25 = 1.75."""
    assert ms.expected_tokens(0.0, 4) == 1.0
    assert ms.expected_tokens(1.0, 4) == 5.0
    assert ms.expected_tokens(0.5, 2) == pytest.approx(1.75)


@pytest.mark.parametrize("seed", range(5))
def test_acceptance_rate_is_one_minus_tv(seed):
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(3, 7, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(3, 7, generator=gen, dtype=torch.float64), -1)
    alpha = ms.acceptance_rate(p, q)
    assert alpha.shape == (3,)
    assert torch.allclose(alpha, 1 - ms.tv_distance(p, q), atol=1e-12)
    keep = (q * torch.clamp(p / q, max=1)).sum(-1)  # E_{x~q}[min(1, p(x)/q(x))], the definition
    assert torch.allclose(alpha, keep, atol=1e-12)


def test_acceptance_and_tv_known_answer():
    """p = [.5, .5, 0], q = [.25, .25, .5]: sum min = .25 + .25 + 0 = .5;
    TV = (.25 + .25 + .5)/2 = .5."""
    p, q = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.25, 0.5])
    assert float(ms.acceptance_rate(p, q)) == pytest.approx(0.5)
    assert float(ms.tv_distance(p, q)) == pytest.approx(0.5)
    assert float(ms.acceptance_rate(p, p)) == pytest.approx(1.0)


def test_speedup_known_answer():
    """alpha = 0.8, gamma = 4, c = 0.1 (a draft step costs a tenth of a target step):
        E[tokens per call] = (1 - 0.8^5) / (1 - 0.8) = (1 - 0.32768) / 0.2 = 3.3616
        cost per call      = gamma * c + v = 4 * 0.1 + 1 = 1.4 target steps
        speedup            = 3.3616 / 1.4 = 2.401142857...
    With verification 20% dearer than one token (v = 1.2): 3.3616 / 1.6 = 2.101.
    A useless draft (alpha = 0) only costs: 1 / 1.4 = 0.714..."""
    assert ms.expected_tokens(0.8, 4) == pytest.approx(3.3616)
    assert ms.speedup(0.8, 4, 0.1) == pytest.approx(2.4011428571428571)
    assert ms.speedup(0.8, 4, 0.1, v=1.2) == pytest.approx(2.101)
    assert ms.speedup(0.0, 4, 0.1) == pytest.approx(1 / 1.4)


def test_best_gamma_is_the_argmax_of_speedup():
    for alpha in (0.2, 0.5, 0.7, 0.9, 0.95):
        for c in (0.01, 0.05, 0.2, 0.5):
            best = ms.best_gamma(alpha, c)
            assert 1 <= best <= 16
            assert all(ms.speedup(alpha, best, c) >= ms.speedup(alpha, g, c) for g in range(1, 17))


def test_best_gamma_sanity():
    assert ms.best_gamma(0.0, 0.1) == 1  # nothing is ever kept: draft as little as possible
    assert ms.best_gamma(0.9, 0.0) == 16  # free drafts: draft as much as allowed
    assert ms.best_gamma(0.9, 0.0, max_gamma=5) == 5
    by_alpha = [ms.best_gamma(a, 0.05) for a in (0.3, 0.5, 0.7, 0.8, 0.9, 0.95)]
    assert by_alpha == sorted(by_alpha) and by_alpha[-1] > by_alpha[0]  # better drafts: longer
    by_cost = [ms.best_gamma(0.8, c) for c in (0.01, 0.05, 0.1, 0.3)]
    assert by_cost == sorted(by_cost, reverse=True)  # dearer drafts: shorter drafts
    # a verification cost that grows with gamma pushes the best gamma down
    assert ms.best_gamma(0.9, 0.01, v=lambda g: 1 + 0.3 * g) < ms.best_gamma(0.9, 0.01)


@pytest.mark.parametrize("gamma", [1, 3, 8])
@pytest.mark.parametrize("alpha", [0.05, 0.3, 0.6, 0.9, 0.99])
def test_alpha_from_acceptance_inverts(alpha, gamma):
    """The expected fraction of drafts kept is
    E[n] / gamma = (alpha + ... + alpha^gamma) / gamma."""
    pmf = truncated_geometric(alpha, gamma)
    rate = sum(n * pn for n, pn in enumerate(pmf)) / gamma
    assert ms.alpha_from_acceptance(rate, gamma) == pytest.approx(alpha, abs=1e-9)


@pytest.mark.parametrize("alpha, gamma", [(0.3, 2), (0.7, 4), (0.9, 8)])
def test_iid_acceptance_simulation_matches_expected_tokens(alpha, gamma):
    """Simulate rounds whose drafts are kept independently with probability alpha."""
    gen = torch.Generator().manual_seed(0)
    n_rounds = 20000
    kept = torch.rand(n_rounds, gamma, generator=gen) < alpha
    n_kept = kept.int().cumprod(1).sum(1)  # leading run of kept drafts
    tokens = (n_kept + 1).double()
    se = float(tokens.std()) / n_rounds ** 0.5
    assert abs(float(tokens.mean()) - ms.expected_tokens(alpha, gamma)) < 4 * se
    freq = torch.bincount(n_kept, minlength=gamma + 1).double() / n_rounds
    pmf = torch.tensor(ms.accepted_pmf(alpha, gamma), dtype=torch.float64)
    assert torch.allclose(freq, pmf, atol=0.015)


def test_speculative_accept_tokens_per_call_matches_theory():
    """With the same p and q at every position, acceptance in speculative_accept is iid with
    alpha = 1 - TV(p, q), so tokens per call average to expected_tokens(alpha, gamma)."""
    gen = torch.Generator().manual_seed(1)
    V, gamma, n_calls = 5, 4, 1500
    p = torch.softmax(torch.randn(V, generator=gen), -1)
    q = torch.softmax(torch.randn(V, generator=gen), -1)
    alpha = float(ms.acceptance_rate(p, q))
    P, Q = p.expand(gamma + 1, V), q.expand(gamma, V)
    drafts = torch.multinomial(q, n_calls * gamma, replacement=True, generator=gen)
    drafts = drafts.view(n_calls, gamma)
    tokens = torch.tensor([ms.speculative_accept(d, Q, P, generator=gen)[0] + 1.0
                           for d in drafts.tolist()])
    se = float(tokens.std()) / n_calls ** 0.5
    assert abs(float(tokens.mean()) - ms.expected_tokens(alpha, gamma)) < 4 * se
    assert 0.2 < alpha < 0.95  # (the case is not degenerate)


def test_step_cost_measures_a_cached_forward(random_gpt, monkeypatch):
    """step_cost (used by notebooks 00 and 03 and the benchmarks): one forward over `context` tokens
    into an empty cache, then `reps` timed forwards of k tokens, each after exactly `context` cached
    entries (a hook on the first block records each forward's length and the cache's); it returns
    the median of the timed ones after the first 5. A fake clock that each forward advances by a
    known time makes that median known: warm-ups of 9 s, then 0.3 0.1 0.2 0.5 s -> 0.25 s. With
    batch_size, every forward has that many rows."""
    from minispec.kit import timing
    m = random_gpt(vocab_size=16, n_layer=1, n_embd=16, block_size=32)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    clock, seen, ticks = [0.0], [], iter(())

    def hook(block, args):
        # Block(x, cache, layer, mask, start): rows, new tokens, cached entries
        seen.append((*args[0].shape[:2], args[1].length))
        clock[0] += next(ticks, 0.0)

    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    handle = m.h[0].register_forward_pre_hook(hook)
    try:
        # the context forward, then the timed ones
        ticks = iter([0.0] + [9.0] * 5 + [0.3, 0.1, 0.2, 0.5])
        assert timing.step_cost(m, 4, context=8, reps=9) == pytest.approx(0.25)
        assert seen == [(1, 8, 0)] + [(1, 4, 8)] * 9
        seen.clear()
        ticks = iter([9.0] * 5 + [0.3, 0.1, 0.2, 0.5])  # no context: every forward is timed
        assert timing.step_cost(m, 2, context=0, reps=9) == pytest.approx(0.25)
        assert seen == [(1, 2, 0)] * 9
        seen.clear()
        # a batch: every row gets the context and k tokens
        ticks = iter([0.0] + [9.0] * 5 + [0.3, 0.1, 0.2, 0.5])
        assert timing.step_cost(m, 3, context=8, reps=9, batch_size=4) == pytest.approx(0.25)
        assert seen == [(4, 8, 0)] + [(4, 3, 8)] * 9
    finally:
        handle.remove()
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())


def test_step_costs_times_every_k_in_turn(random_gpt, monkeypatch):
    """step_costs (benchmarks/real_model.py's and lookup_ceiling.py's profiles): one forward over
    `context` tokens, then reps + 1 sweeps of k = each of ks once (a repeated k once), each after
    exactly `context` cached entries; the first sweep is warm-up, then the median per k. Why in
    turn: on a fake clock a forward over k tokens costs 1 + k/10 s, twice that in a slow spell.
    A spell over step_cost's k = 1 calls reads v(4) = 1.4 / 2.2 = 0.64; one over step_costs'
    first 4 sweeps (its warm-up and 3 of 10 timed) slows both k alike and the medians read the
    true 1.4 / 1.1."""
    from minispec.kit import timing
    m = random_gpt(vocab_size=16, n_layer=1, n_embd=16, block_size=32)
    clock, seen, spell = [0.0], [], [0]

    def hook(block, args):
        k, slow = args[0].shape[1], len(seen) < spell[0]
        seen.append((*args[0].shape[:2], args[1].length))
        if args[1].length:  # a timed forward (not the context's)
            clock[0] += (1 + k / 10) * (2 if slow else 1)

    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    handle = m.h[0].register_forward_pre_hook(hook)
    try:
        spell[0] = 11  # the context's forward and the 10 calls of k = 1
        one, four = timing.step_cost(m, 1, 8, reps=10), timing.step_cost(m, 4, 8, reps=10)
        assert four / one == pytest.approx(1.4 / 2.2)
        seen.clear()
        spell[0] = 9  # the context's forward and 4 sweeps of k = 1, 4
        t = timing.step_costs(m, [1, 4, 1], context=8, reps=10)
        assert seen == [(1, 8, 0)] + [(1, 1, 8), (1, 4, 8)] * 11
        assert list(t) == [1, 4] and t[4] / t[1] == pytest.approx(1.4 / 1.1)
        seen.clear()
        spell[0] = 3  # the context's forward and the first sweep, which is warm-up: not counted
        t = timing.step_costs(m, [1, 4], context=8, reps=1)
        assert t == {1: pytest.approx(1.1), 4: pytest.approx(1.4)}
    finally:
        handle.remove()
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        timing.step_costs(m, [1, 0])
    with pytest.raises(ValueError, match="reps must be an integer >= 1"):
        timing.step_costs(m, [1], reps=0)


def test_call_costs_times_calls_on_several_models_in_turn(random_gpt, monkeypatch):
    """call_costs (notebooks 06 and 12: c = a draft's step over the target's, v over one step):
    one cache and one context forward per (model, context), then every call in turn, each after
    exactly its context. On a fake clock a forward costs 1 s (the draft) or 3 s (the target), twice
    that in a slow spell. A spell over the draft's calls of step_cost read c = 2/3; one over
    call_costs' first 4 sweeps (its warm-up and 3 of 10 timed) slows every call alike and the
    medians read the true 1/3."""
    from minispec.kit import timing
    draft = random_gpt(vocab_size=16, n_layer=1, n_embd=16, block_size=32, seed=1)
    target = random_gpt(vocab_size=16, n_layer=3, n_embd=16, block_size=32, seed=2)
    clock, seen, spell = [0.0], [], [0]

    def hook(block, args):
        seen.append((block is draft.h[0], args[0].shape[1], args[1].length))
        timed = sum(1 for *_, cached in seen if cached)
        if args[1].length:  # a timed forward (not a context's)
            clock[0] += (1 if block is draft.h[0] else 3) * (2 if timed <= spell[0] else 1)

    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    handles = [m.h[0].register_forward_pre_hook(hook) for m in (draft, target)]
    try:
        spell[0] = 10  # the draft's 10 calls of step_cost
        c = timing.step_cost(draft, 1, 8, reps=10) / timing.step_cost(target, 1, 4, reps=10)
        assert c == pytest.approx(2 / 3)
        seen.clear()
        spell[0] = 16  # the first 4 sweeps of the 4 calls
        t = timing.call_costs({"draft": (draft, 1, 8), "target": (target, 1, 4),
                               "v(2)": (target, 2, 4), "later": (target, 1, 6)}, reps=10)
        # one context forward per (model, context): the two target calls after 4 share a cache
        assert seen[:3] == [(True, 8, 0), (False, 4, 0), (False, 6, 0)]
        assert seen[3:] == [(True, 1, 8), (False, 1, 4), (False, 2, 4), (False, 1, 6)] * 11
        assert t == {"draft": pytest.approx(1), "target": pytest.approx(3),
                     "v(2)": pytest.approx(3), "later": pytest.approx(3)}
    finally:
        for h in handles:
            h.remove()
    with pytest.raises(ValueError, match="call 'long': context 30 \\+ k 3 exceeds the model's "
                                         "block_size=32"):
        timing.call_costs({"fine": (draft, 1, 8), "long": (target, 3, 30)})
    with pytest.raises(ValueError, match="at least one call"):
        timing.call_costs({})
    with pytest.raises(ValueError, match="context must be an integer >= 0"):
        timing.call_costs({"a": (draft, 1, -1)})
    assert list(timing.call_costs({"a": (draft, 2.0, 8.0)}, reps=1, warmup=0)) == ["a"]  # 2.0: 2


@pytest.mark.parametrize("call, match", [
    (lambda: ms.accepted_pmf(0.5, -1), "gamma"),      # was [2.0]: a "law" summing to 2
    (lambda: ms.expected_tokens(0.5, -2), "gamma"),   # was 0 tokens a call
    (lambda: ms.expected_tokens(0.5, 2.5), "gamma"),  # was a TypeError from range
    (lambda: ms.best_gamma(0.8, 0.1, max_gamma=0), "max_gamma"),  # was max() of nothing
    (lambda: ms.best_gamma(0.8, 0.1, v=1.42), "function"),  # was a TypeError: 'float' not callable
])
def test_the_closed_forms_name_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()

