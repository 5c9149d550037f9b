"""Verification rules: which drafted tokens does the target keep, and what does it add?

Notation (fixed for the whole project): the target's distribution is p, the draft's is q, the
draft proposes gamma tokens x_1..x_gamma, and alpha is the chance that a drafted token is kept.
(Chen et al. 2023 use the opposite letters, q for the target and p for the draft.)

  * greedy_accept: keep the longest prefix on which the draft agrees with the target's argmax,
    then add the target's own argmax. Output = the target's greedy text exactly.
  * speculative_accept (Leviathan et al. 2023, Alg. 1; Chen et al. 2023, Alg. 2): keep x_i with
    probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection, draw from the residual
    norm(max(0, p_i - q_i)); if all gamma are kept, draw a bonus token from p_{gamma+1}.
    Each emitted token is distributed exactly as p: P(keep, x) + P(reject) * residual(x)
    = min(p, q)(x) + (p - min(p, q))(x) = p(x).
  * multi_draft_accept (SpecInfer, Miao et al. 2024): several candidates drawn iid from q at one
    tree node, tried in turn, replacing p by its residual after each rejection.
"""
import torch

from .sampling import sample


def residual(p, q):
    """norm(max(0, p - q)): what is left of p after q's accepted mass (falls back to p if none)."""
    r = torch.clamp(p - q, min=0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp(min=1e-30), p)


def _check(draft_tokens, p, q=None):
    g = len(draft_tokens)
    if p.dim() != 2 or p.shape[0] != g + 1:
        raise ValueError(f"p must have shape (gamma + 1, V) = ({g + 1}, V), got {tuple(p.shape)}")
    if q is not None and tuple(q.shape) != (g, p.shape[1]):
        raise ValueError(f"q must have shape (gamma, V) = ({g}, {p.shape[1]}), got {tuple(q.shape)}")
    if g and not 0 <= min(draft_tokens) <= max(draft_tokens) < p.shape[1]:
        raise ValueError(f"draft tokens must lie in [0, {p.shape[1]}), got {list(draft_tokens)}")


def greedy_accept(draft_tokens, p):
    """draft_tokens (g,), p (g+1, V) -> (n accepted, token the target adds).

    Example: greedy_accept([2, 0], torch.eye(3)[[2, 1, 0]]) == (1, 1)
    """
    draft_tokens = [int(t) for t in draft_tokens]
    _check(draft_tokens, p)
    best = p.argmax(-1).tolist()  # the target's greedy choice after each prefix
    n = 0
    while n < len(draft_tokens) and draft_tokens[n] == best[n]:
        n += 1
    return n, best[n]


def speculative_accept(draft_tokens, q, p, generator=None):
    """draft_tokens (g,) drawn from q (g, V); target p (g+1, V) -> (n accepted, token added)."""
    draft_tokens = [int(t) for t in draft_tokens]
    _check(draft_tokens, p, q)
    for i, x in enumerate(draft_tokens):
        r = torch.rand((), generator=generator)
        # Step 1: keep x with probability min(1, p/q). Written r * q < p, it needs no division:
        # p == q keeps always (r < 1), p == 0 never keeps, and q == 0 with p > 0 keeps.
        if r * q[i, x] < p[i, x]:
            continue
        # Step 2: rejected -> draw the correction from the residual distribution.
        return i, sample(residual(p[i], q[i]), generator)
    # Step 3: every draft kept -> the target's distribution after them gives a bonus token.
    return len(draft_tokens), sample(p[-1], generator)


def multi_draft_accept(candidates, q, p, generator=None):
    """k candidates drawn iid from q (V,) at one node; target p (V,) -> the emitted token (~ p).

    Try each candidate with min(1, p/q); after a rejection p becomes norm(max(0, p - q)), the
    distribution of what the target still owes; if every candidate fails, sample from that.
    """
    if q.dim() != 1 or p.shape != q.shape:
        raise ValueError(f"p and q must both have shape (V,), got {tuple(p.shape)} and {tuple(q.shape)}")
    for x in (int(c) for c in candidates):
        if torch.rand((), generator=generator) * q[x] < p[x]:
            return x
        p = residual(p, q)
    return sample(p, generator)
