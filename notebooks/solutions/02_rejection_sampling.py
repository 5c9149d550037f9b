"""Notebook 02, exercise "verify a guess that has no distribution": a reference solution and a classic wrong answer."""
import torch

import minispec as ms


def solution(x, p, generator):
    """A guess is a draw from the one-hot q on x: the lossless rule keeps it w.p. min(1, p(x) / 1) = p(x)
    and otherwise samples from the residual norm(max(0, p - onehot(x))), which is p without x, renormalized."""
    q = torch.zeros_like(p)
    q[x] = 1.0
    n, tok = ms.speculative_accept([x], q[None], torch.stack([p, p]), generator)
    return (True, x) if n == 1 else (False, tok)


def wrong(x, p, generator):
    """The classic mistake: keep the guess with probability p(x), but on a rejection sample from p itself
    (not the residual), so x comes out with probability p(x) + (1 - p(x)) p(x) > p(x)."""
    if torch.rand((), generator=generator) < p[x]:
        return True, x
    return False, ms.sample(p, generator)


def global_rng(x, p, generator):
    """Wrong: the right law (a draw from p, kept when it equals the guess), but from torch's global generator."""
    y = int(torch.multinomial(p, 1))
    return y == x, y


more_wrong = [global_rng]  # found by a review: the check must reject these too (tests/test_exercises.py)
