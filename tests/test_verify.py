"""Verification rules (minispec.verify): exact laws of the package's own functions, chi-square,
negative controls.

Notation as in the package: target p (gamma + 1, V), draft q (gamma, V), drafts x_1..x_gamma.
Rows are fixed (the target's next-token law does not depend on the prefix here), so a round of
speculative_accept followed by plain sampling from the next rows must give gamma + 1 tokens with law
p_0 x p_1 x ... x p_gamma, exactly. The exact law is that of the package's function itself
(conftest.exact_law enumerates its random draws); the chi-square runs it with real generators.
The same two checks must flag lossy rules (negative controls).
"""
import collections
import functools

import pytest
import torch
import torch.nn.functional as F

import minispec as ms
from minispec.verify import typical_accept

N_RUNS = 1500  # Monte Carlo runs per case


def product_law(p):
    """p_0 x p_1 x ... : the law of len(p) tokens drawn from the rows of p, as a (V,) * len(p)
    tensor."""
    out = p[0].double()
    for row in p[1:]:
        out = out[..., None] * row.double()
    return out


def tv(a, b):
    return 0.5 * float((a - b).abs().sum())


# --- the cases every rule must be exact for -----------------------------------------------------

CASES = ["random", "q_zeros", "p_zeros", "p_equals_q", "one_hot_q", "one_hot_p", "zeros_both"]


def make_case(name, g=2, V=4, seed=0):
    """A target p (g+1, V) and draft q (g, V) in float64."""
    gen = torch.Generator().manual_seed(seed)

    def rand(rows):
        return torch.softmax(2.0 * torch.randn(rows, V, generator=gen, dtype=torch.float64), -1)

    def norm(t):
        return t / t.sum(-1, keepdim=True)

    p, q = rand(g + 1), rand(g)
    if name == "q_zeros":  # tokens the draft can never propose: only corrections can emit them
        q[:, :2] = 0
        q = norm(q)
    elif name == "p_zeros":  # tokens the target forbids (top-k/top-p): must never be emitted
        p[:, :2] = 0
        p = norm(p)
    elif name == "p_equals_q":  # acceptance exactly 1, the residual 0/0
        p[:g] = q
    elif name == "one_hot_q":  # a deterministic drafter (prompt lookup, greedy draft)
        q = F.one_hot(q.argmax(-1), V).double()
    elif name == "one_hot_p":  # a greedy target, a sampling draft
        p = F.one_hot(p.argmax(-1), V).double()
    elif name == "zeros_both":  # disjoint holes: q misses token 0, p misses token 1
        q[:, 0], p[:, 1] = 0, 0
        p, q = norm(p), norm(q)
    return p, q


def one_round(rule, p, q, draw=None, generator=None):
    """Draw drafts from `draw` (default q), run `rule(drafts, q, p, generator)`, then sample plain
    from the next rows of p up to len(p) tokens -> the emitted tuple."""
    draw = q if draw is None else draw
    drafts = [int(torch.multinomial(row, 1, generator=generator)) for row in draw]
    n, tok = rule(drafts, q, p, generator)
    out = drafts[:n] + [tok]
    while len(out) < len(p):
        out.append(ms.sample(p[len(out)], generator))
    return tuple(out)


def law_of(exact_law, dense, rule, p, q, draw=None):
    return dense(exact_law(lambda: one_round(rule, p, q, draw)), p.shape[1], len(p))


def run_rule(rule, p, q, draw=None, n=N_RUNS, seed=0):
    gen = torch.Generator().manual_seed(seed)
    draw = None if draw is None else draw.float()
    return [one_round(rule, p.float(), q.float(), draw, gen) for _ in range(n)]


def counts_of(emitted, V, m):
    counts = torch.zeros((V,) * m)
    for e, c in collections.Counter(emitted).items():
        counts[e] = c
    return counts


# --- the building blocks: accept_prob and residual -----------------------------------------------

def test_accept_prob_docstring_example_and_edges():
    got = ms.accept_prob(torch.tensor([.5, .1]), torch.tensor([.25, .4]))
    assert torch.allclose(got, torch.tensor([1.0, .25]))
    p, q = torch.tensor([0.0, 0.2, 0.3, 0.5]), torch.tensor([0.4, 0.0, 0.3, 0.3])
    # p = 0 never; q = 0 (never drawn) 1; p = q 1
    assert ms.accept_prob(p, q).tolist() == [0.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("name", CASES)
def test_accepted_mass_plus_residual_is_p(name):
    """The proof of losslessness in one line, with the package's own pieces, row by row:
    q * accept_prob(p, q) = min(p, q), kept; the rest, 1 - alpha, goes to residual(p, q) = norm(p -
    min(p, q))."""
    p, q = make_case(name)
    for pi, qi in zip(p, q):
        kept = qi * ms.accept_prob(pi, qi)
        alpha = kept.sum()
        assert torch.allclose(kept, torch.minimum(pi, qi), atol=1e-15)
        assert torch.allclose(alpha, ms.acceptance_rate(pi, qi), atol=1e-15)
        assert torch.allclose(kept + (1 - alpha) * ms.residual(pi, qi), pi, atol=1e-12, rtol=0)


def test_residual_known_answer():
    """p - q = [0.3, -0.2, -0.1, 0.0] -> max(0, .) = [0.3, 0, 0, 0] -> normalized [1, 0, 0, 0]."""
    p, q = torch.tensor([0.5, 0.3, 0.2, 0.0]), torch.tensor([0.2, 0.5, 0.3, 0.0])
    assert torch.allclose(ms.residual(p, q), torch.tensor([1.0, 0, 0, 0]))
    # [0.2, 0.2, 0] -> [.5, .5, 0]
    p, q = torch.tensor([0.4, 0.4, 0.2]), torch.tensor([0.2, 0.2, 0.6])
    assert torch.allclose(ms.residual(p, q), torch.tensor([0.5, 0.5, 0.0]))


def test_residual_rows_and_equal_rows():
    p, q = make_case("random", g=3, V=6, seed=2)
    p = p[:3].clone()
    p[1] = q[1]  # nothing left: falls back to p, a valid distribution
    r = ms.residual(p, q)
    assert r.shape == (3, 6) and torch.allclose(r.sum(-1), torch.ones(3, dtype=torch.float64))
    for i in (0, 2):
        want = (p[i] - q[i]).clamp(min=0)
        assert torch.allclose(r[i], want / want.sum(), atol=1e-15)
    assert torch.equal(r[1], p[1])


# --- speculative_accept: its exact law ------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_speculative_accept_exact_law_is_the_target(name, exact_law, dense):
    p, q = make_case(name)
    law = law_of(exact_law, dense, ms.speculative_accept, p, q)
    assert torch.allclose(law, product_law(p), atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["random", "one_hot_q", "zeros_both"])
def test_speculative_accept_chi_square(name, chi2_pvalue):
    """The same, statistically, with real generators: the emitted tuples and their first token."""
    p, q = make_case(name)
    emitted = run_rule(ms.speculative_accept, p, q, seed=CASES.index(name))
    assert chi2_pvalue(counts_of(emitted, 4, 3), product_law(p)) > 1e-4
    first = torch.bincount(torch.tensor([e[0] for e in emitted]), minlength=4)
    assert chi2_pvalue(first, p[0]) > 1e-4


def test_p_equals_q_always_accepts(exact_law):
    """p == q: min(1, p/q) = 1, so every draft is kept, with probability exactly 1."""
    p, q = make_case("p_equals_q", g=3, V=5)
    def kept_drafts():
        return ms.speculative_accept([int(torch.multinomial(r, 1)) for r in q], q, p)[0]

    kept = exact_law(kept_drafts)
    assert kept == {3: pytest.approx(1.0, abs=1e-12)}


def test_one_hot_q_is_kept_with_probability_p(exact_law):
    """A deterministic draft x is kept with probability p(x) exactly; a rejection never re-emits
    x."""
    p = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15], [0.2] * 5], dtype=torch.float64)
    q = F.one_hot(torch.tensor([2]), 5).double()
    law = exact_law(lambda: ms.speculative_accept([2], q, p))
    assert sum(m for (n, _), m in law.items() if n == 1) == pytest.approx(0.3, abs=1e-12)
    assert all(tok != 2 for (n, tok), m in law.items() if n == 0 and m > 0)


def test_empty_draft_samples_from_p(exact_law, dense):
    """gamma = 0 (a drafter with nothing to propose): the token is simply drawn from p_0."""
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0]], dtype=torch.float64)
    law = exact_law(lambda: ms.speculative_accept([], torch.zeros(0, 4, dtype=torch.float64), p))
    assert set(n for n, _ in law) == {0}
    assert torch.allclose(dense({(t,): m for (_, t), m in law.items()}, 4, 1), p[0], atol=1e-15)


def test_same_seed_same_result():
    p, q = make_case("random", g=4, V=5, seed=7)
    a = run_rule(ms.speculative_accept, p, q, n=200, seed=11)
    b = run_rule(ms.speculative_accept, p, q, n=200, seed=11)
    assert a == b and a != run_rule(ms.speculative_accept, p, q, n=200, seed=12)


# --- negative controls: lossy setups the same two checks must flag -------------------------------

def always_accept(draft_tokens, q, p, generator=None):
    """Lossy: keep every draft, then a bonus from p. Emits the draft's law, not the target's."""
    return len(draft_tokens), ms.sample(p[-1], generator)


def threshold_accept(draft_tokens, q, p, generator=None, tau=0.1):
    """Lossy (the survey's threshold rule): keep x if p(x) >= tau, else sample from p."""
    for i, x in enumerate(draft_tokens):
        if p[i, x] < tau:
            return i, ms.sample(p[i], generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


def control(name, p, q):
    """-> (rule, the law the drafts are really drawn from) of each lossy setup."""
    if name == "always_accept":
        return always_accept, q
    if name == "threshold":
        return threshold_accept, q
    if name == "greedy_draft_soft_q":  # draft = argmax q, but verified with q itself
        return ms.speculative_accept, F.one_hot(q.argmax(-1), q.shape[1]).double()
    if name == "filtered_draft_raw_q":  # draft drawn from the top-2 of q, verified with the raw q
        return ms.speculative_accept, ms.probs(q.log(), top_k=2)
    raise KeyError(name)


@pytest.mark.parametrize("name", ["always_accept", "threshold", "greedy_draft_soft_q",
                                  "filtered_draft_raw_q"])
def test_lossy_rules_are_detected(name, exact_law, dense, chi2_pvalue):
    p, q = make_case("random", seed=5)
    rule, draw = control(name, p, q)
    law = law_of(exact_law, dense, rule, p, q, draw)
    assert abs(float(law.sum()) - 1) < 1e-12
    assert tv(law, product_law(p)) > 0.05  # the exact check flags it ...
    emitted = run_rule(rule, p, q, draw, seed=1)
    # ... and so does the chi-square
    assert chi2_pvalue(counts_of(emitted, 4, 3), product_law(p)) < 1e-6
    assert chi2_pvalue(counts_of(emitted, 4, 3), law) > 1e-4  # (the control does what it says)


# --- greedy_accept ------------------------------------------------------------------------------

def test_greedy_accept_docstring_example():
    """Targets argmax [2, 1, 0]; drafts [2, 0]: the 2 is kept, the 0 is not, the target adds 1."""
    assert ms.greedy_accept([2, 0], torch.eye(3)[[2, 1, 0]]) == (1, 1)
    assert ms.greedy_accept([2, 1], torch.eye(3)[[2, 1, 0]]) == (2, 0)  # all kept: bonus 0
    assert ms.greedy_accept([0, 1], torch.eye(3)[[2, 1, 0]]) == (0, 2)


@pytest.mark.parametrize("seed", range(6))
def test_greedy_accept_is_longest_agreeing_prefix(seed):
    gen = torch.Generator().manual_seed(seed)
    g, V = 6, 4
    p = torch.softmax(torch.randn(g + 1, V, generator=gen), -1)
    best = p.argmax(-1).tolist()
    agree = int(torch.randint(0, g + 1, (), generator=gen))  # the draft agrees for `agree` tokens
    draft = best[:agree] + [(b + 1) % V for b in best[agree:g]]
    assert ms.greedy_accept(draft, p) == (agree, best[agree])
    assert ms.greedy_accept(torch.tensor(draft), p) == (agree, best[agree])  # a tensor works too


@pytest.mark.parametrize("seed", range(4))
def test_speculative_accept_with_one_hot_p_and_q_is_greedy(seed, exact_law):
    """Temperature 0 makes both p and q one-hot; the sampling rule then reduces to greedy_accept,
    surely."""
    gen = torch.Generator().manual_seed(seed)
    g, V = 5, 4
    p = torch.eye(V)[torch.randint(0, V, (g + 1,), generator=gen)]
    draft = p.argmax(-1)[:g].clone()
    draft[seed % g] = (draft[seed % g] + 1) % V
    q = torch.eye(V)[draft]
    law = exact_law(lambda: ms.speculative_accept(draft, q, p))
    assert law == {ms.greedy_accept(draft, p): 1.0}


@pytest.mark.parametrize("bad", ["p_rows", "q_shape", "token_range"])
def test_accept_rejects_bad_shapes(bad):
    p, q, draft = torch.full((3, 4), 0.25), torch.full((2, 4), 0.25), [0, 1]
    if bad == "p_rows":
        p, match = p[:2], "p must have shape"
    elif bad == "q_shape":
        q, match = q[:1], "q must have shape"
    else:
        draft, match = [0, 4], r"each draft token must be an integer in \[0, 4\)"
    with pytest.raises(ValueError, match=match):
        ms.speculative_accept(draft, q, p)
    if bad != "q_shape":
        with pytest.raises(ValueError, match=match):
            ms.greedy_accept(draft, p)


# --- multi_draft_accept (SpecInfer): k candidates at one node ------------------------------------

def node_law(exact_law, rule, p, q, k):
    """The exact law of the token `rule` emits from k candidates drawn iid from q: (V,) float64."""
    law = exact_law(lambda: rule(torch.multinomial(q, k, replacement=True).tolist(), q, p))
    return torch.tensor([law.get(t, 0.0) for t in range(len(p))], dtype=torch.float64)


def node_counts(rule, p, q, k, n, seed=0):
    g, counts = torch.Generator().manual_seed(seed), torch.zeros(len(p))
    for _ in range(n):
        counts[rule(torch.multinomial(q, k, replacement=True, generator=g).tolist(), q, p, g)] += 1
    return counts


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("name", ["random", "q_zeros", "p_zeros", "p_equals_q", "one_hot_q",
                                  "zeros_both"])
def test_multi_draft_accept_exact_law_is_p(name, k, exact_law):
    p, q = make_case(name, g=1, V=4, seed=k)
    law = node_law(exact_law, ms.multi_draft_accept, p[0], q[0], k)
    assert torch.allclose(law, p[0], atol=1e-12, rtol=0)


def no_residual_update(candidates, q, p, generator=None):
    """Lossy: every candidate tried against the ORIGINAL p (no residual update between tries)."""
    for x in candidates:
        if torch.rand((), generator=generator) < ms.accept_prob(p[x], q[x]):
            return x
    return ms.sample(ms.residual(p, q), generator)


@pytest.mark.parametrize("rule", [no_residual_update,
                                  functools.partial(typical_accept, eps=0.3, delta=0.6)],
                         ids=["no_residual_update", "typical_accept"])
def test_multi_draft_lossy_rules_are_detected(rule, exact_law, chi2_pvalue):
    """Retrying every candidate against the original p over-emits the draft's favourites; Medusa's
    typical acceptance keeps any candidate that is likely enough. Both are flagged, exactly and by
    chi-square, while multi_draft_accept passes the same chi-square."""
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    assert tv(node_law(exact_law, rule, p, q, 3), p) > 0.05
    assert chi2_pvalue(node_counts(rule, p, q, 3, 2000), p) < 1e-6
    assert chi2_pvalue(node_counts(ms.multi_draft_accept, p, q, 3, 2000), p) > 1e-3


def test_multi_draft_accept_rejects_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        ms.multi_draft_accept([0], torch.full((4,), 0.25), torch.full((5,), 0.2))
    for bad in ([-1], [0, 4]):  # -1 would silently index from the end
        with pytest.raises(ValueError, match=r"each candidate must be an integer in \[0, 4\)"):
            ms.multi_draft_accept(bad, torch.full((4,), 0.25), torch.full((4,), 0.25))


def test_verify_tree_checks_the_shape_of_p():
    tree = ms.Tree.chain([1, 2])  # 2 nodes: p needs 3 rows (root, node 0, node 1)
    for bad in (torch.full((2, 4), 0.25), torch.full((3,), 1 / 3), torch.full((4, 4), 0.25)):
        with pytest.raises(ValueError, match=r"p must have shape \(1 \+ N, V\) = \(3, V\)"):
            ms.verify_tree(tree, bad)


# --- a rule's signature, said once in minispec.verify (issue 27, item 3) ------------------------

def counted(candidates, q, p, generator=None, replacement=True):
    """The default rule behind a one-line def, as one would write it to count or log the calls."""
    return ms.multi_draft_accept(candidates, q, p, generator, replacement)


WRAPPED = {"functools.partial": functools.partial(ms.multi_draft_accept), "a def": counted}
DRAFTERS = {"lookup": lambda t: ms.load_drafter("lookup", t),
            "heads": lambda t: ms.load_drafter("medusa", t),
            "lookahead": lambda t: ms.Lookahead(t),
            "sampled tree": lambda t: ms.load_drafter("draft", t, branching=(2, 2)),
            "distinct siblings": lambda t: ms.load_drafter("draft", t, branching=(3, 2),
                                                           replacement=False)}


@pytest.mark.parametrize("wrap", WRAPPED)
@pytest.mark.parametrize("name", DRAFTERS)
def test_a_wrapped_default_rule_is_the_default_rule(shipped, name, wrap):
    """The default rule wrapped (functools.partial, or a one-line def) makes the same draws as the
    rule itself, on trees of deterministic guesses (no q: lookup, heads, lookahead) as on sampled
    ones, so the same seed gives the same tokens. verify_tree used to pick the branch for
    guesses by the rule's identity and handed the wrapper q = None (AttributeError)."""
    ids = ms.encode("for i in range(10):\n    for j in range(10):\n        ")
    runs = [ms.speculative_generate(shipped, DRAFTERS[name](shipped), ids, 16, gamma=6,
                                    temperature=1.0, seed=3, **kw)
            for kw in ({}, {"rule": WRAPPED[wrap]})]
    assert runs[0].tokens == runs[1].tokens
    assert any(s.tree.tokens for s in runs[1].steps)  # the rule met drafted children


def test_typical_accept_takes_a_tree_drawn_without_replacement(shipped):
    """Every rule takes the signature, replacement included: typical acceptance on distinct
    siblings (it ignores q, so how they were drawn does not matter to it) used to raise a
    TypeError."""
    drafter = ms.load_drafter("draft", shipped, branching=(3, 2), replacement=False)
    res = ms.speculative_generate(shipped, drafter, ms.encode("import os\nimport "), 12, gamma=6,
                                  temperature=1.0, rule=typical_accept)
    assert len(res.tokens) == 12
    assert any(not s.tree.replacement and len(s.tree.children(-1)) > 1 for s in res.steps)
    p, q = torch.tensor([0.5, 0.3, 0.2, 0.0]), torch.tensor([0.1, 0.2, 0.3, 0.4])
    assert typical_accept([1, 2], q, p, replacement=False) == typical_accept([1, 2], q, p) == 1


@pytest.mark.parametrize("rule", ["multi_draft_accept", "speculative_accept"])
def test_a_token_the_target_never_emits_is_never_kept(monkeypatch, rule):
    """torch.rand can return exactly 0.0: the check must be r < min(1, p/q), so that p(x) = 0 keeps
    x with probability 0 (r <= would keep it on that draw). The exact-law checks' coin treats <= as
    <, so they cannot see this; a coin that lands on 0.0 does."""
    p, q = torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.5])
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.tensor(0.0))
    if rule == "multi_draft_accept":
        assert ms.multi_draft_accept([0], q, p) == 1
    else:
        assert ms.speculative_accept([0], q[None], torch.stack([p, p])) == (0, 1)
