"""The checks the course runs on its own code, said once (notebooks and tests both use them):

  * `exact_law(fn)`: the exact law of what fn() returns, by running the package's own code once per
    outcome of its random draws; `target_law`: the law of plain sampling from a model, enumerated.
    Lossless means the two are equal (float64).
  * `chi2_pvalue(counts, probs)`: Pearson's chi-square test of counts against a law (rare cells
    pooled, then `pearson`).
  * `repeated_share(prompt, tokens)` (from `data`): how much of a continuation repeats text seen
    before it (greedy text from these tiny models loops, and a loop is easy to draft).
"""
import contextlib
import itertools
import random
from collections.abc import Mapping
from unittest import mock

import numpy
import torch

from ..sampling import probs, whole
from .data import repeated_share  # noqa: F401 (checks.repeated_share, as the notebooks call it)


def chi2_pvalue(counts, expected_probs, min_expected=5.0, fitted=0):
    """p-value of Pearson's chi-square test that `counts` were drawn from `expected_probs`.

    A cell with probability 0 must never be observed (if one is, the p-value is 0). Cells expecting
    fewer than `min_expected` counts are pooled into one (with the rarest other cell if the pool
    still expects fewer), so that the chi-square approximation holds; then `pearson` tests them
    (fitted: parameters fitted to these counts, a degree of freedom each).
    counts: per cell, or a Counter of outcomes (each an index into expected_probs).
    """
    if isinstance(expected_probs, Mapping):  # torch.as_tensor raised a TypeError
        raise ValueError("expected_probs must be one probability per cell, a list or a tensor")
    if isinstance(counts, Mapping):  # a Counter: torch.as_tensor raised a TypeError on it
        dense = [0] * torch.as_tensor(expected_probs).numel()
        for x, c in counts.items():
            dense[whole(x, "each outcome counted (an index into the probs)", 0, len(dense))] += c
        counts = dense
    counts = torch.as_tensor(counts, dtype=torch.float64).flatten()
    p = torch.as_tensor(expected_probs, dtype=torch.float64).flatten()
    if counts.shape != p.shape:
        raise ValueError(f"counts {tuple(counts.shape)} and probs {tuple(p.shape)} differ")
    if not ((counts >= 0).all() and (p >= 0).all() and counts.isfinite().all()):  # nan, inf: no
        raise ValueError("counts and expected probabilities must be finite numbers >= 0")
    if not ((counts == counts.round()).all() and counts.sum() > 0):  # frequencies would pass
        raise ValueError(f"counts must be whole numbers, not all 0 (frequencies?), got {counts}")
    if abs(float(p.sum()) - 1) > 1e-6:
        raise ValueError(f"expected probabilities must sum to 1, got {float(p.sum()):.6f}")
    if (counts[p <= 1e-12] > 0).any():
        return 0.0
    counts, p = counts[p > 1e-12], p[p > 1e-12]
    expected = p / p.sum() * counts.sum()
    small = expected < min_expected
    if small.any() and expected[small].sum() < min_expected:  # the pool still expects too few
        small[expected.masked_fill(small, float("inf")).argmin()] = True  # add the rarest other
    if small.any():
        counts = torch.cat([counts[~small], counts[small].sum(0, keepdim=True)])
        expected = torch.cat([expected[~small], expected[small].sum(0, keepdim=True)])
    return 1.0 if len(counts) < 2 else pearson(counts, expected, fitted)


def pearson(observed, expected, fitted=0):
    """Pearson (1900): X^2 = sum_k (O_k - E_k)^2 / E_k over the cells, and its p-value
    P(chi-square with df degrees >= X^2) = Q(df / 2, X^2 / 2), Q the regularized upper incomplete
    gamma function, df = cells - 1 - fitted (counts: lists or tensors, as float64)."""
    observed, expected = as_cells(observed, expected)  # one shape, float64, no 0 / 0 cell
    if len(observed) - 1 - whole(fitted, "fitted (parameters fitted to the counts)", 0) < 1:
        raise ValueError(f"{len(observed)} cells leave no degree of freedom after {fitted} fitted")
    stat = ((observed - expected) ** 2 / expected).sum()
    df = torch.tensor(len(observed) - 1 - fitted, dtype=torch.float64)
    return float(torch.special.gammaincc(df / 2, stat / 2))


def as_cells(observed, expected):
    """Counts per cell -> float64 tensors of one shape, less the cells that expect 0 and saw 0 (a
    0 / 0 term: nan); one that expects 0 and saw more makes X^2 infinite, and p = 0."""
    observed, expected = (torch.as_tensor(x, dtype=torch.float64) for x in (observed, expected))
    if observed.shape != expected.shape:
        raise ValueError(f"observed {tuple(observed.shape)} and expected {tuple(expected.shape)} "
                         "counts differ in shape")
    cells = (expected > 0) | (observed > 0)
    return observed[cells], expected[cells]


class _Coin:
    """What torch.rand(()) returns inside exact_law: a uniform draw u, known to lie in [lo, hi)
    (at first [0, 1)). `coin < a` is a branch point, True with probability P(u < a | lo <= u < hi),
    a for a fresh coin, and it narrows [lo, hi): a rule that compares one draw again (one u reused
    at every position) is enumerated as that rule, not as one with a fresh draw each time."""

    def __init__(self, choose):
        self.choose, self.lo, self.hi = choose, 0.0, 1.0

    def __lt__(self, a):
        a = min(self.hi, max(self.lo, float(a)))
        below = self.choose([self.hi - a, a - self.lo]) == 1
        self.lo, self.hi = (self.lo, a) if below else (a, self.hi)
        return below

    __le__ = __lt__  # a uniform draw equals a with probability 0: `coin <= a` is `coin < a`

    def __ge__(self, a):  # `coin >= a`: the same branch point, the other side
        return not self < a

    __gt__ = __ge__


# other ways to draw a token or a coin (a model's initialization, randn and uniform_, stays free)
DRAWS = {torch: "randint randint_like randperm bernoulli rand_like normal poisson",
         torch.Tensor: "multinomial exponential_ bernoulli_ random_ geometric_",
         random: "random uniform choice choices randint randrange sample shuffle gauss",
         numpy.random: "rand random choice randint default_rng normal uniform permutation shuffle"}
OTHER_DRAWS = [(owner, name) for owner, names in DRAWS.items() for name in names.split()]


def exact_law(fn):
    """enumerate_draws(fn), with OTHER_DRAWS raising NotImplementedError while fn runs: their
    randomness would hide from the enumeration (and its law would be wrong, silently)."""
    with contextlib.ExitStack() as refusals:
        for owner, name in OTHER_DRAWS:
            stand_in = refused(f"{owner.__name__}.{name}")
            refusals.enter_context(mock.patch.object(owner, name, stand_in))
        return enumerate_draws(fn)


def own_rule(fn, rules=None):
    """fn, with the package's verifiers (or the functions `rules`) refusing to run while it runs,
    however fn reaches them (ms.speculative_accept, or a name imported before): an exercise that
    asks for the rule written by hand rejects a call to them (notebook 02's once passed them).
    Each one's code is swapped for refused_rule's while fn runs, so every reference refuses."""
    from minispec import verify
    rules = rules or [getattr(verify, name) for name in ("speculative_accept",
                                                         "multi_draft_accept", "verify_tree")]

    def guarded(*args, **kwargs):
        codes = [rule.__code__ for rule in rules]
        try:
            for rule in rules:
                rule.__code__ = refused_rule.__code__
            return fn(*args, **kwargs)
        finally:
            for rule, code in zip(rules, codes):
                rule.__code__ = code
    return guarded


def refused_rule(*args, **kwargs):
    """What a package verifier runs inside own_rule: calling it fails the exercise."""
    raise AssertionError("write the rule yourself (or the conversion): the package's own refuses "
                         "to run inside the exercise")


def refused(name):
    """A stand-in for a draw that exact_law cannot enumerate: calling it raises."""
    def draw(*args, **kwargs):
        raise NotImplementedError(f"exact_law: {name}; draw with torch.multinomial(p, n) or "
                                  "torch.rand(()) < a")
    return draw


def enumerate_draws(fn):
    """The exact law of fn()'s (hashable) result: {result: probability} in float64.

    fn is the package's own code, run once per outcome of its random draws: every draw of
    torch.multinomial(p, n, replacement) and every comparison `torch.rand(()) < a` is a branch
    point, explored depth first with its probability (p / p.sum(), or a and 1 - a). Draws without
    replacement zero each drawn id's weight for the next draw (and, as torch does, raise if fewer
    than n ids have weight). torch.rand of another size fails loudly (exact_law refuses the other
    draws). Keep the vocabulary and the length tiny: the work grows as the number of outcomes.
    """
    law, todo = {}, [[]]
    real = torch.rand, torch.multinomial
    while todo:
        forced, taken, weight = todo.pop(), [], [1.0]

        def choose(w):
            w = [float(x) for x in w]
            if len(taken) < len(forced):
                c = forced[len(taken)]
            else:
                options = [i for i, x in enumerate(w) if x > 0]
                todo.extend(taken + [i] for i in options[1:])
                c = options[0]
            taken.append(c)
            weight[0] *= w[c] / sum(w)
            return c

        def rand(*size, generator=None, **kw):
            if size not in ((), ((),)):
                raise NotImplementedError(f"exact_law: torch.rand{size}")
            return _Coin(choose)

        def multinomial(p, num_samples, replacement=False, generator=None):  # torch's names
            if p.dim() != 1:
                raise NotImplementedError("exact_law: 1-d p only")
            w, out = p.tolist(), []
            if not replacement and num_samples > sum(x > 0 for x in w):
                raise RuntimeError("exact_law: fewer ids with weight than draws (no replacement)")
            for _ in range(num_samples):
                out.append(choose(w))
                if not replacement:
                    w = [0.0 if i == out[-1] else x for i, x in enumerate(w)]
            return torch.tensor(out, dtype=torch.long)

        torch.rand, torch.multinomial = rand, multinomial
        try:
            out = fn()
        finally:
            torch.rand, torch.multinomial = real
        out = as_key(out)  # a tensor by value (tensors hash by identity), a list as a tuple
        law[out] = law.get(out, 0.0) + weight[0]
    return law


def as_key(out):
    """An outcome as a dict key by value: a tensor of one number -> the number, a longer tensor,
    a list or a tuple -> a tuple of keys; anything else as it is."""
    if torch.is_tensor(out):
        out = out.item() if out.numel() == 1 else out.tolist()
    return tuple(as_key(x) for x in out) if isinstance(out, (list, tuple)) else out


def dense(law, V, m):
    """{tuple of m tokens: probability} -> a (V,) * m float64 tensor."""
    out = torch.zeros((V,) * m, dtype=torch.float64)
    for seq, prob in law.items():
        if len(seq) != m or not all(0 <= t < V for t in seq):  # a short key fills a slice
            raise ValueError(f"every sequence must hold m={m} tokens in [0, {V}), got {seq!r}")
        out[tuple(seq)] += prob
    return out


@torch.no_grad()
def target_law(model, prompt, m, temperature=1.0, top_k=None, top_p=None):
    """P(x_1..x_m | prompt) of plain sampling from `model`, every sequence enumerated: a (V,) * m
    float64 tensor. Each factor is `probs` of the model's own logits (float64), as `generate`
    samples from."""
    V, m = model.config.vocab_size, whole(m, "m (the tokens enumerated)")
    if getattr(prompt, "ndim", 1) != 1 or any(isinstance(t, (list, tuple)) for t in prompt):
        raise ValueError(f"the prompt must be one sequence of token ids, got {prompt!r:.60}")
    if len(prompt) == 0 or not all(0 <= int(t) < V for t in prompt):
        raise ValueError(f"the prompt must be at least one token id in [0, {V}), got {prompt!r}")
    prompt = [whole(t, "each prompt token id", 0, V) for t in prompt]  # 1.0 is 1, 1.5 no
    seqs = torch.tensor(list(itertools.product(range(V), repeat=m)))  # (V^m, m)
    x = torch.cat([torch.tensor(prompt).expand(len(seqs), -1), seqs], 1)
    p = probs(model(x)[:, len(prompt) - 1:-1].double(), temperature, top_k, top_p)  # (V^m, m, V)
    return p.gather(-1, seqs[..., None])[..., 0].prod(-1).view((V,) * m)
