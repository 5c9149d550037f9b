"""From logits to a distribution to a token: temperature, top-k, top-p, explicit generators.

Speculative sampling is lossless only if the draft token really was drawn from the `q` that the
verifier sees, so one function, `probs`, turns logits into the distribution sampled from,
identically for target (p) and draft (q).
"""
import numbers

import torch
import torch.nn.functional as F


def whole(value, name, low=1, high=float("inf")):
    """An integral number in [low, high) (4, 4.0, numpy.int64(4)) as an int, else a ValueError."""
    try:
        ok = not isinstance(value, bool) and int(value) == value and low <= value < high
    except (TypeError, ValueError, OverflowError):  # None, a string, nan, inf
        ok = False
    if not ok:
        span = f">= {low}" if high == float("inf") else f"in [{low}, {high})"
        raise ValueError(f"{name} must be an integer {span}, got {value!r}")
    return int(value)


def real(value, name):
    """A number (a tensor too, if it holds one), else a ValueError naming it: None, "1": no."""
    if not (isinstance(value, numbers.Real) or torch.is_tensor(value) and value.numel() == 1):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return value


def check_sampling_args(temperature=1.0, top_k=None, top_p=None):
    if not 0 <= real(temperature, "temperature") < float("inf"):  # inf: uniform, whatever p
        raise ValueError(f"temperature must be finite and >= 0 (0: greedy), got {temperature}")
    if top_k is not None:
        whole(top_k, "top_k (or None)")
    if top_p is not None and not 0 < real(top_p, "top_p (or None)") <= 1:
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p}")


def probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Logits (..., V) -> the warped next-token distribution (..., V), rows summing to 1.

    Order as in Hugging Face: temperature, then top-k (keep the k largest logits), then top-p
    (keep the smallest set of most likely tokens whose mass reaches top_p).
    Example: probs(torch.tensor([0., 1., 2.]), temperature=0) -> tensor([0., 0., 1.])
    """
    check_sampling_args(temperature, top_k, top_p)
    logits = torch.as_tensor(logits)  # a list of numbers too
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # softmax in >= float32
    if temperature == 0:  # greedy: one-hot on the argmax (ties: the lowest id)
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    logits = (logits - logits.amax(-1, keepdim=True)) / temperature  # max first: no overflow
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, int(top_k), dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    p = F.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1:
        sorted_p, order = torch.sort(p, dim=-1, descending=True)
        mass_before = sorted_p.cumsum(-1) - sorted_p  # mass of the strictly more likely tokens
        nucleus = sorted_p.masked_fill(mass_before >= top_p, 0.0)  # still sorted by likelihood
        p = torch.zeros_like(p).scatter(-1, order, nucleus)  # each back at its own token id
        p = p / p.sum(-1, keepdim=True)
    return p


def sample(p, generator=None):
    """Draw one token id from a distribution p (V,) using an explicit torch.Generator."""
    return int(torch.multinomial(torch.as_tensor(p) * 1.0, 1, generator=generator))  # ints too
