"""Medusa's typical acceptance: a LOSSY rule with minispec.verify's signature, kept beside the
lossless ones to be measured and to be caught by the losslessness checks (notebooks 02, 05, 07).
Moved out of the core; minispec.verify.typical_accept still names it.
"""
import torch

from ..sampling import real, sample, whole


def typical_accept(candidates, q, p, generator=None, replacement=True, *, eps=0.09, delta=0.3):
    """LOSSY (Medusa, Cai et al. 2024, with its code's eps and delta): keep the first candidate
    with p(x) > min(eps, delta * exp(-H(p))), else sample from p. Faster on high-entropy text;
    the output no longer follows p. It reads neither q nor how the candidates were drawn."""
    candidates = checked(candidates, p, eps, delta)  # else a ValueError
    entropy = -(p * p.clamp(min=1e-30).log()).sum()
    ok = [x for x in candidates if p[x] > min(eps, delta * float(torch.exp(-entropy)))]
    return ok[0] if ok else sample(p, generator)


def checked(candidates, p, eps, delta):
    """typical_accept's arguments -> the candidates as ints, or a ValueError naming the bad one
    (a negative delta kept every candidate, one the target gives 0 among them)."""
    if not (0 < real(eps, "eps") < float("inf") and 0 < real(delta, "delta") < float("inf")):
        raise ValueError(f"eps and delta must be finite and > 0, got {eps} and {delta}")
    if not (torch.is_tensor(p) and p.dim() == 1):
        raise ValueError(f"p must be the target's distribution, a (V,) tensor, got {p!r}")
    return [whole(c, "each candidate", 0, len(p)) for c in candidates]  # -1, 7: no
