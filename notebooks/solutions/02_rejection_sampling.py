"""Notebook 02's exercises, "the rule over gamma drafts" (`*_rule`) and "verify a guess that has no
distribution": reference solutions and classic wrong answers (tests/test_exercises.py)."""
import random

import torch

import minispec as ms
from minispec.verify import speculative_accept


def solution(x, p, generator):
    """A guess is a draw from the one-hot q on x: the lossless rule keeps it w.p.
    min(1, p(x) / 1) = p(x) and otherwise samples from the residual norm(max(0, p - onehot(x))),
    which is p without x, renormalized."""
    if torch.rand((), generator=generator) < p[x]:
        return True, x
    r = p.clone()
    r[x] = 0.0  # max(0, p - onehot(x)): p without x
    return False, ms.sample(r / r.sum(), generator)


def wrong(x, p, generator):
    """The classic mistake: keep the guess with probability p(x), but on a rejection sample from p
    itself (not the residual), so x comes out with probability p(x) + (1 - p(x)) p(x) > p(x)."""
    if torch.rand((), generator=generator) < p[x]:
        return True, x
    return False, ms.sample(p, generator)


def global_rng(x, p, generator):
    """Wrong: the right law (a draw from p, kept when it equals the guess), but from torch's global
    generator."""
    y = int(torch.multinomial(p, 1))
    return y == x, y


def package_verifier(x, p, generator):
    """Wrong for this exercise, right in law: the package's verifier does the work the exercise
    asks the reader to write (the reference solution once did this, and the check passed it)."""
    q = torch.zeros_like(p)
    q[x] = 1.0
    n, tok = ms.speculative_accept([x], q[None], torch.stack([p, p]), generator)
    return (True, x) if n == 1 else (False, tok)


def imported_verifier(x, p, generator):
    """Wrong the same way, through a name imported before the check ran (the check once looked up
    only the package's attributes, and passed it)."""
    q = torch.zeros_like(p)
    q[x] = 1.0
    n, tok = speculative_accept([x], q[None], torch.stack([p, p]), generator)
    return (True, x) if n == 1 else (False, tok)


# found by reviews: the check must reject these too
def reseeded(x, p, generator):
    """Wrong: torch's global generator seeded "for reproducibility" inside, then drawn from: the
    right law, but every call returns the same answer (found by a red team of the checks)."""
    torch.manual_seed(0)
    return solution(x, p, None)


def own_generator(x, p, generator):
    """Wrong the same way: a fresh generator of its own on every call, `generator` ignored."""
    return solution(x, p, torch.Generator().manual_seed(0))


def float_coin(x, p, generator):
    """Rejected with the check's guidance, not a TypeError about exact_law's coin: the right law,
    its coin read with float() (exact_law enumerates a coin only through `< a`; a review's)."""
    if float(torch.rand((), generator=generator)) < float(p[x]):
        return True, x
    rest = p.clone()
    rest[x] = 0
    return False, ms.sample(rest / rest.sum(), generator)


more_wrong = [global_rng, package_verifier, imported_verifier, reseeded, own_generator, float_coin]


# Exercise "the rule": accept(draft_tokens, q, p, generator) -> (n accepted, the target's token).

def solution_rule(draft_tokens, q, p, generator):
    """Keep x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection draw from the
    residual norm(max(0, p_i - q_i)); if every draft is kept, the bonus comes from p's last row."""
    for i, x in enumerate(draft_tokens):
        if torch.rand((), generator=generator) < min(1.0, float(p[i, x] / q[i, x])):
            continue
        r = torch.clamp(p[i] - q[i], min=0)
        return i, ms.sample(r / r.sum(), generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


def wrong_rule(draft_tokens, q, p, generator):
    """The classic mistake: at a rejection, draw the replacement from p itself, not the residual
    (the rejected token can come back, and the tokens q over-proposes come out too often)."""
    for i, x in enumerate(draft_tokens):
        if torch.rand((), generator=generator) < min(1.0, float(p[i, x] / q[i, x])):
            continue
        return i, ms.sample(p[i], generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


def unnormalised_residual(draft_tokens, q, p, generator):
    """Wrong: the residual max(0, p - q) sampled as it is. torch.multinomial renormalises any
    weights, so the law is right; the check asks for a distribution (it sums to 1) and looks."""
    for i, x in enumerate(draft_tokens):
        if torch.rand((), generator=generator) < min(1.0, float(p[i, x] / q[i, x])):
            continue
        return i, ms.sample(torch.clamp(p[i] - q[i], min=0), generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


def reversed_residual(draft_tokens, q, p, generator):
    """Wrong: the residual the wrong way round, norm(max(0, q - p)): the tokens q over-proposes."""
    for i, x in enumerate(draft_tokens):
        if torch.rand((), generator=generator) < min(1.0, float(p[i, x] / q[i, x])):
            continue
        r = torch.clamp(q[i] - p[i], min=0)
        return i, ms.sample(r / r.sum(), generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


def bonus_wrong_row(draft_tokens, q, p, generator):
    """Wrong: the bonus drawn from p[i], the loop variable left at the last draft's row (gamma - 1),
    not from the row after every draft (gamma)."""
    i = 0
    for i, x in enumerate(draft_tokens):
        if torch.rand((), generator=generator) < min(1.0, float(p[i, x] / q[i, x])):
            continue
        r = torch.clamp(p[i] - q[i], min=0)
        return i, ms.sample(r / r.sum(), generator)
    return len(draft_tokens), ms.sample(p[i], generator)


def deterministic_accept(draft_tokens, q, p, generator):
    """Wrong: keep x_i exactly when p_i(x_i) >= q_i(x_i), with no coin (a draft with p < q is
    always rejected, where the rule keeps it with probability p / q)."""
    for i, x in enumerate(draft_tokens):
        if p[i, x] >= q[i, x]:
            continue
        r = torch.clamp(p[i] - q[i], min=0)
        return i, ms.sample(r / r.sum(), generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


def global_rng_rule(draft_tokens, q, p, generator):
    """Wrong: the right rule, with its coins from torch's global generator, not `generator`."""
    for i, x in enumerate(draft_tokens):
        if torch.rand(()) < min(1.0, float(p[i, x] / q[i, x])):
            continue
        r = torch.clamp(p[i] - q[i], min=0)
        return i, ms.sample(r / r.sum(), generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


def package_rule(draft_tokens, q, p, generator):
    """Wrong for this exercise, right in law: the package's rule, which the exercise says not to
    use (the check once passed it)."""
    return ms.speculative_accept(list(draft_tokens), q, p, generator)


def imported_rule(draft_tokens, q, p, generator):
    """Wrong the same way, through a name imported before the check ran."""
    return speculative_accept(list(draft_tokens), q, p, generator)


def one_coin_rule(draft_tokens, q, p, generator):
    """Wrong: one uniform u drawn up front and compared at every position, so the acceptances are
    correlated (both drafts kept with probability min(a_1, a_2), not a_1 a_2). The check once
    enumerated each comparison as a fresh coin and passed it (a student review)."""
    u = torch.rand((), generator=generator)
    for i, x in enumerate(draft_tokens):
        if u < min(1.0, float(p[i, x] / q[i, x])):
            continue
        r = torch.clamp(p[i] - q[i], min=0)
        return i, ms.sample(r / r.sum(), generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


def python_random_rule(draft_tokens, q, p, generator):
    """Wrong: the right rule, with its coins from Python's `random` (neither seeded by `generator`
    nor seen by the enumeration: exact_law refuses it)."""
    for i, x in enumerate(draft_tokens):
        if random.random() < min(1.0, float(p[i, x] / q[i, x])):
            continue
        r = torch.clamp(p[i] - q[i], min=0)
        return i, ms.sample(r / r.sum(), generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


def reseeded_rule(draft_tokens, q, p, generator):
    """Wrong: the right rule on torch's global generator, seeded inside: the same answer always."""
    torch.manual_seed(0)
    return solution_rule(draft_tokens, q, p, None)


def own_generator_rule(draft_tokens, q, p, generator):
    """Wrong: the right rule on a fresh generator of its own, `generator` ignored."""
    return solution_rule(draft_tokens, q, p, torch.Generator().manual_seed(0))


def product_coin_rule(draft_tokens, q, p, generator):
    """Rejected with the check's guidance, as float_coin: the right rule, the coin compared as
    u q(x) < p(x) (the same event as u < p(x) / q(x) where q(x) > 0)."""
    for i, x in enumerate(draft_tokens):
        if torch.rand((), generator=generator) * q[i, x] < p[i, x]:
            continue
        return i, ms.sample(ms.residual(p[i], q[i]), generator)
    return len(draft_tokens), ms.sample(p[-1], generator)


more_wrong_rule = [unnormalised_residual, reversed_residual, bonus_wrong_row, deterministic_accept,
                   global_rng_rule, package_rule, imported_rule, one_coin_rule, python_random_rule,
                   reseeded_rule, own_generator_rule, product_coin_rule]
