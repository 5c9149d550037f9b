"""The lossy shortcut people reach for: keep a draft if it is among the target's k most likely
tokens. It is not one of the package's rules (minispec.verify): it is here to be measured and to be
caught by the losslessness checks (tests/test_search.py, benchmarks/search_drafts.py).
"""
import torch

from ..sampling import sample, whole
from .typical import candidate_ids


def topk_accept(candidates, q, p, generator=None, replacement=True, *, k=2):
    """LOSSY: keep the first candidate among the target's k most likely tokens (with p(x) > 0),
    else sample from p; Stern et al. 2018 relax blockwise parallel decoding's greedy check this way.
    A rule with minispec.verify's signature: speculative_generate(..., rule=partial(topk_accept,
    k=3)). It reads neither q nor how the candidates were drawn: a kept candidate is emitted with
    probability 1 where p gives it p(x), so the output over-weights the draft's favourites.
    Example: topk_accept([1], None, torch.tensor([.5, .3, .2]), k=2) == 1
    """
    candidates = candidate_ids(candidates, p)  # else a ValueError, as in typical_accept
    top = set(torch.topk(p, min(whole(k, "k"), p.shape[-1])).indices.tolist())
    ok = [x for x in candidates if x in top and p[x] > 0]
    return ok[0] if ok else sample(p, generator)
