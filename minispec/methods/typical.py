"""Medusa's typical acceptance: a LOSSY rule with minispec.verify's signature, kept beside the
lossless ones to be measured and to be caught by the losslessness checks (notebooks 02, 05, 07).
Moved out of the core; minispec.verify.typical_accept still names it.
"""
import torch

from ..sampling import real, sample, whole
from ..verify import _law


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
    for name, value in (("eps", eps), ("delta", delta)):  # real() takes True as 1: not here
        if isinstance(value, bool) or not 0 < real(value, name) < float("inf"):
            raise ValueError(f"eps and delta must be finite numbers > 0, got {name}={value!r}")
    return candidate_ids(candidates, p)


def candidate_ids(candidates, p):
    """A rule's candidates (a list of token ids) and the target's p (V,) -> the candidates as ints,
    or a ValueError naming the bad one (typical_accept's check, topk_accept's too)."""
    if not (torch.is_tensor(p) and p.dim() == 1):
        raise ValueError(f"p must be the target's distribution, a (V,) tensor, got {p!r}")
    _law(p, "p")  # logits would be read as probabilities (p[x] > threshold), silently
    try:
        candidates = list(candidates)
    except TypeError:  # None, an int, a 0-d tensor
        raise ValueError(f"candidates must be a list of token ids, got {candidates!r}") from None
    return [whole(c, "each candidate", 0, len(p)) for c in candidates]  # -1, 7: no
