"""Closed forms of speculative decoding (Leviathan et al. 2023, section 3), and the costs they need.

alpha    expected acceptance of one drafted token (acceptance_rate)
gamma    drafted tokens per target call
c        cost of one draft step divided by the cost of one target step
v        cost of one target call on gamma + 1 tokens divided by one on 1 token (1 if free)
c and v are measured on this machine with minispec.kit.timing.step_cost (notebooks 00, 03).
"""
import torch

from ..sampling import real, whole


def chance(alpha, name="alpha"):
    """alpha: a number, or a tensor of them, each in [0, 1]; else a ValueError naming it."""
    values = alpha if torch.is_tensor(alpha) else torch.tensor(float(real(alpha, name)))
    if not bool(((values >= 0) & (values <= 1)).all()):  # nan fails both
        raise ValueError(f"{name} must lie in [0, 1], got {alpha!r}")
    return alpha


def two_laws(p, q):
    """p and q: tensors of one shape (distributions over the last dimension), else a ValueError."""
    if not (torch.is_tensor(p) and torch.is_tensor(q) and p.shape == q.shape):
        raise ValueError(f"p and q must be tensors of one shape, got {p!r} and {q!r}")
    if torch.bool in (p.dtype, q.dtype):  # p - q of bools is a RuntimeError
        raise ValueError("p and q must be numbers, not bools: p.float()")
    sums = torch.stack([p.double().sum(-1), q.double().sum(-1)])  # nan fails the test below
    if not (bool((p >= 0).all() and (q >= 0).all()) and bool(((sums - 1).abs() < 1e-2).all())):
        raise ValueError(f"p and q must be distributions, >= 0 and summing to 1 over the last "
                         f"dimension (sums {float(sums.min()):.4g} to {float(sums.max()):.4g}): "
                         "logits? ms.probs(logits) turns them into one")


def tv_distance(p, q):
    """Total variation distance 0.5 * sum |p - q| (over the last dimension)."""
    two_laws(p, q)
    return 0.5 * (p - q).abs().sum(-1)


def acceptance_rate(p, q):
    """alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q): the chance a token drawn from q is kept."""
    two_laws(p, q)
    return torch.minimum(p, q).sum(-1)


def expected_tokens(alpha, gamma):
    """E[tokens per target call] = E[drafts kept] + 1 = sum_{k=0}^gamma alpha^k, that is
    (1 - alpha^(gamma+1)) / (1 - alpha) below alpha = 1; alpha: a number or a tensor of them."""
    alpha = chance(alpha)
    return sum(alpha ** k for k in range(whole(gamma, "gamma", 0) + 1))


def accepted_pmf(alpha, gamma):
    """P(n drafted tokens kept), n = 0..gamma, each kept independently with probability alpha:
    truncated geometric, alpha^n (1 - alpha) for n < gamma, alpha^gamma at gamma."""
    alpha, gamma = chance(alpha), whole(gamma, "gamma", 0)
    return [alpha ** n * (1 - alpha) for n in range(gamma)] + [alpha ** gamma]


def alpha_from_acceptance(rate, gamma):
    """Invert the measured kept fraction E[n] / gamma = (alpha + ... + alpha^gamma) / gamma."""
    rate = float(chance(real(rate, "the kept fraction (one number)"), "the kept fraction"))
    gamma = whole(gamma, "gamma")
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: the fraction grows with alpha
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(1, gamma + 1)) / gamma < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def speedup(alpha, gamma, c, v=1.0):
    """Walltime speedup over autoregressive decoding: E[tokens per call] / (gamma * c + v)."""
    if not (0 <= real(c, "c") < float("inf") and 0 < real(v, "v") < float("inf")):  # in steps
        raise ValueError(f"need a draft cost c >= 0 and a verify cost v > 0, both finite, got "
                         f"c={c}, v={v}")
    return expected_tokens(alpha, gamma) / (gamma * c + v)  # one call's cost, in target steps


def best_gamma(alpha, c, max_gamma=16, v=None):
    """The gamma in 1..max_gamma with the highest speedup; v: gamma -> v(gamma + 1) (default 1)."""
    if v is not None and not callable(v):
        raise ValueError(f"v must be a function gamma -> verify cost (or None), got {v!r}")
    gammas = range(1, whole(max_gamma, "max_gamma") + 1)
    chance(real(alpha, "alpha (one number: best_gamma picks one gamma)"))
    return max(gammas, key=lambda g: speedup(alpha, g, c, 1.0 if v is None else v(g)))
