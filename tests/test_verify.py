"""Verification rules, checked against exact enumeration and by chi-square with fixed seeds.

Notation as in the package: target p (gamma + 1, V), draft q (gamma, V), drafts x_1..x_gamma.

Two checks of losslessness are used throughout, and the same two checks must *reject* four lossy
setups (negative controls), so we know they can fail:
  * exact: enumerate every draft sequence with its probability and the rule's acceptance
    probability, giving the exact law of the emitted tokens; with fixed target rows p_j, lossless
    means the law of the (j+1)-th emitted token, given the first j were kept drafts, is p_j.
  * statistical: run the rule many times (drafts drawn with a seeded torch.Generator) and test the
    first emitted token against p_0 with a chi-square test.
"""
import collections

import pytest
import torch

import minispec as ms

N_RUNS = 1500  # Monte Carlo runs per case: ~0.4 s each


# --- an exact reference, written from the math, independent of minispec ------------------------

def f64(t):
    """float64 rows renormalized to sum to 1 exactly (float32 inputs are off by ~1e-7)."""
    t = t.double()
    return t / t.sum(-1, keepdim=True)


def exact_residual(p, q):
    """norm(max(0, p - q)) in float64; p itself when nothing is left (then no rejection happens)."""
    r = (f64(p) - f64(q)).clamp(min=0)
    return r / r.sum() if r.sum() > 0 else f64(p)


def exact_step(p, q, draw=None, accept=None, fallback=None):
    """Exact law of what one verification step emits, by enumerating every draft sequence.

    p (g+1, V): target rows; q (g, V): the draft distribution the rule is *told* about.
    draw (g, V): what the drafts are really drawn from (default q; a buggy drafter may differ).
    accept(i, x) -> P(keep x at position i); default the Leviathan/Chen rule min(1, p_i(x)/q_i(x)).
    fallback(i) -> (V,) law of the token added after a rejection at i; default norm(max(0, p_i - q_i)).
    Returns {emitted tuple (kept drafts + the added token): probability} in float64.
    """
    p, q = f64(p), f64(q)
    draw = q if draw is None else f64(draw)
    accept = accept or (lambda i, x: 1.0 if p[i, x] >= q[i, x] else float(p[i, x] / q[i, x]))
    fallback = fallback or (lambda i: exact_residual(p[i], q[i]))
    g, V = q.shape
    out = {}

    def add(key, mass):
        out[key] = out.get(key, 0.0) + mass

    def walk(i, prefix, mass):
        if i == g:  # every draft kept: the bonus token comes from p_g
            for t in range(V):
                add(prefix + (t,), mass * float(p[g, t]))
            return
        for x in range(V):
            if draw[i, x] == 0:
                continue
            m, a = mass * float(draw[i, x]), accept(i, x)
            if a > 0:
                walk(i + 1, prefix + (x,), m * a)
            if a < 1:
                r = fallback(i)
                for t in range(V):
                    add(prefix + (t,), m * (1 - a) * float(r[t]))

    walk(0, (), 1.0)
    return {k: v for k, v in out.items() if v > 0}


def exact_lossless_tv(dist, p):
    """Largest TV distance, over positions j and emitted prefixes of length j that the step goes on
    past, between the law of the next emitted token and p_j. Zero iff the step is lossless."""
    nxt = {}
    for key, mass in dist.items():
        for j in range(len(key)):
            row = nxt.setdefault(key[:j], torch.zeros(p.shape[1], dtype=torch.float64))
            row[key[j]] += mass
    return max(float(ms.tv_distance(row / row.sum(), f64(p[len(prefix)])))
               for prefix, row in nxt.items() if row.sum() > 1e-9)


def run_rule(rule, p, q, draw=None, n=N_RUNS, seed=0):
    """Run `rule(draft_tokens, q, p, generator)` n times on drafts drawn from `draw` (default q);
    return the emitted tuples (kept drafts + the added token)."""
    gen = torch.Generator().manual_seed(seed)
    draw = q if draw is None else draw
    drafts = torch.stack([torch.multinomial(row, n, replacement=True, generator=gen) for row in draw], 1)
    emitted = []
    for d in drafts.tolist():
        kept, tok = rule(d, q, p, gen)
        emitted.append(tuple(d[:kept]) + (tok,))
    return emitted


def first_token_pvalue(emitted, p0, chi2_pvalue):
    """The statistical check: chi-square p-value of the first emitted tokens against p_0."""
    counts = torch.bincount(torch.tensor([e[0] for e in emitted]), minlength=len(p0))
    return chi2_pvalue(counts, p0)


def tuple_pvalue(emitted, dist, chi2_pvalue):
    """Chi-square p-value of the emitted tuples against an exact law (0 if an impossible one shows up)."""
    tally = collections.Counter(emitted)
    keys = sorted(set(dist) | set(tally))
    counts = torch.tensor([tally[k] for k in keys])
    return chi2_pvalue(counts, torch.tensor([dist.get(k, 0.0) for k in keys], dtype=torch.float64))


# --- the cases the rule must be exact for -------------------------------------------------------

CASES = ["random", "q_zeros", "p_zeros", "p_equals_q", "one_hot_q", "one_hot_p", "zeros_both"]


def make_case(name, g=2, V=4, seed=0):
    """A target p (g+1, V) and draft q (g, V) in float32, as the package would see them."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda rows: torch.softmax(2.0 * torch.randn(rows, V, generator=gen), -1)
    p, q = rand(g + 1), rand(g)
    norm = lambda t: t / t.sum(-1, keepdim=True)
    if name == "q_zeros":  # tokens the draft can never propose: only corrections can emit them
        q[:, :2] = 0
        q = norm(q)
    elif name == "p_zeros":  # tokens the target forbids (top-k/top-p): must never be emitted
        p[:, :2] = 0
        p = norm(p)
    elif name == "p_equals_q":  # 0/0 nowhere, acceptance exactly 1
        p[:g] = q
    elif name == "one_hot_q":  # a deterministic drafter (prompt lookup, greedy draft)
        q = torch.nn.functional.one_hot(q.argmax(-1), V).float()
    elif name == "one_hot_p":  # a greedy target, a sampling draft
        p = torch.nn.functional.one_hot(p.argmax(-1), V).float()
    elif name == "zeros_both":  # disjoint holes: q misses token 0, p misses token 1
        q[:, 0], p[:, 1] = 0, 0
        p, q = norm(p), norm(q)
    return p, q


@pytest.mark.parametrize("name", CASES)
def test_exact_reference_is_lossless(name):
    """The rule itself (enumerated exactly) emits every token with the target's law."""
    p, q = make_case(name)
    dist = exact_step(p, q)
    assert abs(sum(dist.values()) - 1) < 1e-12
    assert exact_lossless_tv(dist, p) < 1e-9


@pytest.mark.parametrize("name", CASES)
def test_speculative_accept_matches_exact_law(name, chi2_pvalue):
    """speculative_accept's emitted tuples follow the exact law, and its first token follows p_0."""
    p, q = make_case(name)
    dist = exact_step(p, q)
    emitted = run_rule(ms.speculative_accept, p, q, seed=CASES.index(name))
    assert tuple_pvalue(emitted, dist, chi2_pvalue) > 1e-4
    assert first_token_pvalue(emitted, p[0], chi2_pvalue) > 1e-4


def test_p_equals_q_always_accepts():
    """p == q: min(1, p/q) = 1, so every draft is kept, every time (not just on average)."""
    p, q = make_case("p_equals_q", g=3, V=5)
    emitted = run_rule(ms.speculative_accept, p, q, n=500)
    assert all(len(e) == 4 for e in emitted)


def test_target_zeros_never_emitted():
    p, q = make_case("p_zeros", g=3, V=5)  # tokens 0 and 1 have p = 0 at every position
    emitted = run_rule(ms.speculative_accept, p, q, n=500)
    assert not any(t in (0, 1) for e in emitted for t in e)
    assert any(len(e) > 1 for e in emitted)  # some drafts were kept (the check is not vacuous)


def test_one_hot_q_accepts_with_probability_p():
    """A deterministic draft x is kept with probability p(x) exactly; a rejection never re-emits x."""
    V = 5
    p = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15], [0.2] * 5])
    q = torch.nn.functional.one_hot(torch.tensor([2]), V).float()
    emitted = run_rule(ms.speculative_accept, p, q, n=N_RUNS, seed=3)
    kept = sum(len(e) == 2 for e in emitted)
    sd = (N_RUNS * 0.3 * 0.7) ** 0.5
    assert abs(kept - 0.3 * N_RUNS) < 4 * sd
    assert all(e[0] != 2 for e in emitted if len(e) == 1)


def test_empty_draft_samples_from_p(chi2_pvalue):
    """gamma = 0 drafts (e.g. a drafter with nothing to propose): the token is simply drawn from p_0."""
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0]])
    gen = torch.Generator().manual_seed(0)
    out = [ms.speculative_accept([], torch.zeros(0, 4), p, generator=gen) for _ in range(1000)]
    assert all(n == 0 for n, _ in out)
    assert chi2_pvalue(torch.bincount(torch.tensor([t for _, t in out]), minlength=4), p[0]) > 1e-4


def test_same_seed_same_result():
    p, q = make_case("random", g=4, V=5, seed=7)
    a = run_rule(ms.speculative_accept, p, q, n=200, seed=11)
    b = run_rule(ms.speculative_accept, p, q, n=200, seed=11)
    assert a == b


# --- negative controls: lossy rules that the same two checks must flag --------------------------

def always_accept(draft_tokens, q, p, generator=None):
    """Lossy: keep every draft, then a bonus from p. Emits the draft's law, not the target's."""
    return len(draft_tokens), ms.sample(p[-1], generator)


TAU = 0.1


def threshold_accept(draft_tokens, q, p, generator=None):
    """Lossy (the survey's Alg. 1 threshold rule): keep x if p(x) >= tau, else sample from p."""
    for i, x in enumerate(draft_tokens):
        if p[i, x] < TAU:
            return i, ms.sample(p[i], generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


def control(name, p, q):
    """-> (rule, draw, exact law) for each lossy setup."""
    if name == "always_accept":
        return always_accept, q, exact_step(p, q, accept=lambda i, x: 1.0)
    if name == "threshold":
        return threshold_accept, q, exact_step(p, q, accept=lambda i, x: float(p[i, x] >= TAU),
                                                fallback=lambda i: f64(p[i]))
    if name == "greedy_draft_soft_q":  # draft = argmax q, but verified with q itself
        greedy = torch.nn.functional.one_hot(q.argmax(-1), q.shape[1]).float()
        return ms.speculative_accept, greedy, exact_step(p, q, draw=greedy)
    if name == "filtered_draft_raw_q":  # draft drawn from top-2 of q, verified with the raw q
        kth = q.topk(2, -1).values[:, -1:]
        top2 = torch.where(q >= kth, q, torch.zeros_like(q))
        top2 = top2 / top2.sum(-1, keepdim=True)
        return ms.speculative_accept, top2, exact_step(p, q, draw=top2)
    raise KeyError(name)


@pytest.mark.parametrize("name", ["always_accept", "threshold", "greedy_draft_soft_q", "filtered_draft_raw_q"])
def test_lossy_rules_are_detected(name, chi2_pvalue):
    p, q = make_case("random", seed=5)
    rule, draw, dist = control(name, p, q)
    assert abs(sum(dist.values()) - 1) < 1e-12
    assert exact_lossless_tv(dist, p) > 0.01  # the exact check flags it ...
    emitted = run_rule(rule, p, q, draw=draw, seed=1)
    assert first_token_pvalue(emitted, p[0], chi2_pvalue) < 1e-6  # ... and so does the chi-square
    assert tuple_pvalue(emitted, exact_step(p, q), chi2_pvalue) < 1e-6
    assert tuple_pvalue(emitted, dist, chi2_pvalue) > 1e-4  # (the control does what it says)


# --- residual -----------------------------------------------------------------------------------

def test_residual_known_answer():
    """p - q = [0.3, -0.2, -0.1, 0.0] -> max(0, .) = [0.3, 0, 0, 0] -> normalized [1, 0, 0, 0]."""
    p, q = torch.tensor([0.5, 0.3, 0.2, 0.0]), torch.tensor([0.2, 0.5, 0.3, 0.0])
    assert torch.allclose(ms.residual(p, q), torch.tensor([1.0, 0, 0, 0]))
    p, q = torch.tensor([0.4, 0.4, 0.2]), torch.tensor([0.2, 0.2, 0.6])  # [0.2, 0.2, 0] -> [.5, .5, 0]
    assert torch.allclose(ms.residual(p, q), torch.tensor([0.5, 0.5, 0.0]))


def test_residual_rows_and_equal_rows():
    p, q = make_case("random", g=3, V=6, seed=2)
    p, q = p[:3], q
    p[1] = q[1]  # nothing left: falls back to p, a valid distribution
    r = ms.residual(p, q)
    assert r.shape == (3, 6)
    assert torch.allclose(r.sum(-1), torch.ones(3))
    for i in (0, 2):
        assert torch.allclose(r[i].double(), exact_residual(p[i], q[i]), atol=1e-6)
    assert torch.allclose(r[1], p[1])


# --- greedy_accept ------------------------------------------------------------------------------

def test_greedy_accept_docstring_example():
    """Targets argmax [2, 1, 0]; drafts [2, 0]: the 2 is kept, the 0 is not, the target adds 1."""
    assert ms.greedy_accept([2, 0], torch.eye(3)[[2, 1, 0]]) == (1, 1)
    assert ms.greedy_accept([2, 1], torch.eye(3)[[2, 1, 0]]) == (2, 0)  # all kept: bonus 0
    assert ms.greedy_accept([0, 1], torch.eye(3)[[2, 1, 0]]) == (0, 2)


@pytest.mark.parametrize("seed", range(10))
def test_greedy_accept_is_longest_agreeing_prefix(seed):
    gen = torch.Generator().manual_seed(seed)
    g, V = 6, 4
    p = torch.softmax(torch.randn(g + 1, V, generator=gen), -1)
    best = p.argmax(-1).tolist()
    agree = int(torch.randint(0, g + 1, (), generator=gen))  # the draft agrees for `agree` tokens
    draft = best[:agree] + [(b + 1) % V for b in best[agree:g]]
    assert ms.greedy_accept(draft, p) == (agree, best[agree])
    assert ms.greedy_accept(torch.tensor(draft), p) == (agree, best[agree])  # a tensor works too


@pytest.mark.parametrize("seed", range(5))
def test_speculative_accept_with_one_hot_p_and_q_is_greedy(seed):
    """Temperature 0 makes both p and q one-hot; the sampling rule then reduces to greedy_accept."""
    gen = torch.Generator().manual_seed(seed)
    g, V = 5, 4
    p = torch.eye(V)[torch.randint(0, V, (g + 1,), generator=gen)]
    draft = p.argmax(-1)[:g].clone()
    draft[seed % g] = (draft[seed % g] + 1) % V
    q = torch.eye(V)[draft]
    for s in range(5):
        assert ms.speculative_accept(draft, q, p, generator=torch.Generator().manual_seed(s)) == \
            ms.greedy_accept(draft, p)


@pytest.mark.parametrize("bad", ["p_rows", "q_shape", "token_range"])
def test_accept_rejects_bad_shapes(bad):
    p, q, draft = torch.full((3, 4), 0.25), torch.full((2, 4), 0.25), [0, 1]
    if bad == "p_rows":
        p, match = p[:2], "p must have shape"
    elif bad == "q_shape":
        q, match = q[:1], "q must have shape"
    else:
        draft, match = [0, 4], "draft tokens"
    with pytest.raises(ValueError, match=match):
        ms.speculative_accept(draft, q, p)
    if bad != "q_shape":
        with pytest.raises(ValueError, match=match):
            ms.greedy_accept(draft, p)


# --- multi_draft_accept (SpecInfer) -------------------------------------------------------------

def exact_multi_draft(p, q, k, update=True):
    """Exact law of the emitted token: k candidates iid from q, tried in turn with min(1, p/q);
    after a rejection p becomes norm(max(0, p - q)) (update=False: the lossy 'keep p' variant)."""
    p, q = f64(p), f64(q)
    out, reach = torch.zeros_like(p), 1.0
    for _ in range(k):
        keep = torch.where(q > 0, torch.minimum(q, p), torch.zeros_like(p))  # q(x) * min(1, p/q)
        out += reach * keep
        reach *= 1 - float(keep.sum())
        if update:
            p = exact_residual(p, q)
    return out + reach * p


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("name", ["random", "q_zeros", "p_zeros", "one_hot_q"])
def test_multi_draft_accept_is_lossless(name, k, chi2_pvalue):
    p, q = make_case(name, g=1, V=4, seed=k)
    p, q = p[0], q[0]
    assert torch.allclose(exact_multi_draft(p, q, k), f64(p), atol=1e-9)
    gen = torch.Generator().manual_seed(k)
    toks = [ms.multi_draft_accept(torch.multinomial(q, k, replacement=True, generator=gen).tolist(), q, p,
                                  generator=gen) for _ in range(600)]
    assert chi2_pvalue(torch.bincount(torch.tensor(toks), minlength=4), p) > 1e-4


def test_multi_draft_without_residual_update_is_detected(chi2_pvalue):
    """Negative control: retrying every candidate against the original p over-emits the draft's
    favourites; the same exact and chi-square checks flag it."""
    p, q = make_case("random", g=1, V=4, seed=5)
    p, q, k = p[0], q[0], 3
    assert float(ms.tv_distance(exact_multi_draft(p, q, k, update=False), f64(p))) > 0.01
    gen = torch.Generator().manual_seed(0)
    toks = []
    for _ in range(1000):
        cands = torch.multinomial(q, k, replacement=True, generator=gen).tolist()
        tok = next((x for x in cands if float(torch.rand((), generator=gen)) * q[x] < p[x]), None)
        toks.append(ms.sample(p, gen) if tok is None else tok)
    assert chi2_pvalue(torch.bincount(torch.tensor(toks), minlength=4), p) < 1e-6


def test_multi_draft_accept_rejects_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        ms.multi_draft_accept([0], torch.full((4,), 0.25), torch.full((5,), 0.2))
