"""The held-out text every notebook and benchmark reads: six files of the Python 3.11.7 standard
library (PSF license) the shipped models never trained on, shipped so that no result depends on
the Python that runs it (Colab's differs). Only retraining reads the local standard library.
`repeated_share` measures how much of a text repeats itself (checks.repeated_share too).
"""
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from ..sampling import whole

HELD_OUT = ("calendar.py", "fractions.py", "heapq.py", "shlex.py", "statistics.py", "textwrap.py")
DATA_DIR = Path(__file__).parent / "data"


def heldout_files():
    """The six held-out files, as bytes, in the order above."""
    return [(DATA_DIR / f"{name}.txt").read_bytes() for name in HELD_OUT]


def heldout():
    """All held-out text as one byte tensor (files separated by a blank line)."""
    return torch.tensor(list(b"".join(f + b"\n\n" for f in heldout_files())), dtype=torch.long)


def prompts(n=8, length=128, offset=0):
    """n prompts of `length` bytes from the held-out files, each starting at a line start: prompt i
    starts a quarter, a half, ... into file i % 6 (prompts(8) are the benchmarks' prompts).
    offset: skip that many prompts (prompts(10, offset=8): ten others)."""
    files, out = heldout_files(), []
    n = whole(n, "n")
    length = whole(length, "length")
    offset = whole(offset, "offset", 0)
    if offset + n > 3 * len(files):  # a quarter, a half and three quarters into each file
        raise ValueError(f"the held-out files give {3 * len(files)} prompts, asked for "
                         f"prompts {offset}..{offset + n - 1}")
    for i in range(offset, offset + n):
        data = files[i % len(files)]
        start = data.index(b"\n", len(data) * (1 + i // len(files)) // 4) + 1
        if start + length > len(data):  # a shorter prompt would break the promise above
            raise ValueError(f"prompt {i}: {len(data) - start} bytes left in its file, "
                             f"not {length}")
        out.append(list(data[start:start + length]))
    return out


@torch.no_grad()
def bits_per_byte(model, data, block_size=256, max_windows=128):
    """Bits per byte of every exit of `model` (last entry: the full model) on `data`, over up to
    max_windows non-overlapping windows spread evenly across it (so every held-out file counts)."""
    block_size = whole(block_size, "block_size")
    weight = model.wte.weight  # the windows, positions and sums follow its device and dtype
    data = token_ids(data).to(weight.device)  # a list of ids (ms.encode's) or bytes too
    n = min(whole(max_windows, "max_windows"), (len(data) - 1) // block_size)
    if n < 1:
        raise ValueError(f"{len(data)} tokens of data: bits_per_byte needs more than "
                         f"block_size={block_size} (a window and its next token)")
    totals = weight.new_zeros(model.config.n_layer)
    for w in range(n):
        s = w * ((len(data) - 1) // n)
        x = model.embed(data[s:s + block_size][None], torch.arange(block_size, device=data.device))
        for layer in range(model.config.n_layer):  # exit after each block: the shared ln_f and head
            x = model.blocks(x, layers=[layer])
            logits = model.lm_head(model.ln_f(x))[0]
            totals[layer] += F.cross_entropy(logits, data[s + 1:s + block_size + 1])
    return (totals / n / math.log(2)).tolist()


def token_ids(data):
    """Token ids as a 1-d long tensor: a list, bytes (a byte is its byte-level id) or a tensor."""
    try:
        ids = torch.as_tensor(list(data) if isinstance(data, (bytes, bytearray)) else data)
    except (TypeError, ValueError, RuntimeError):  # text (encode it first), None, ragged rows
        ids = None
    if ids is None or ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"data must be token ids (a list, bytes or a 1-d integer tensor), got "
                         f"{data!r:.60}")
    return ids.long()


@torch.no_grad()
def alignment(target, draft, data=None, block_size=256, windows=32, spread=True):
    """How well a draft matches its target on held-out text -> (top-1 agreement, 1 - TV): the share
    of positions where their argmaxes agree (what greedy verification keeps) and the mean of
    1 - TV(p, q) = sum_x min(p(x), q(x)), the chance a draft sampled at temperature 1 is kept
    (Leviathan et al. 2023). Over `windows` windows of block_size bytes of data (default: all the
    held-out text, and the draft's whole block, so every position it meets counts), spread evenly
    over it, or (spread=False) the first ones: with block_size=128, the first 4 KB, which the model
    card's older figures used."""
    data = heldout() if data is None else token_ids(data)  # a list of ids or bytes too
    windows, block_size = whole(windows, "windows"), whole(block_size, "block_size")
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError(f"target and draft vocabularies differ: {target.config.vocab_size} "
                         f"and {draft.config.vocab_size}")
    need = block_size + (windows if windows > 1 else 0) if spread else windows * block_size
    if len(data) < need:  # spread: windows at least one token apart, not 32 copies of one
        raise ValueError(f"{len(data)} tokens of data are too few for {windows} windows of "
                         f"block_size={block_size}" + (" spread over them" if spread else ""))
    step = (len(data) - block_size) // windows if spread else block_size
    x = torch.stack([data[w * step:w * step + block_size] for w in range(windows)])  # (B, T)
    p = F.softmax(target(x.to(target.wte.weight.device)), -1)  # (B, T, V), on the target's device
    q = F.softmax(draft(x.to(draft.wte.weight.device)), -1).to(p)  # the draft's, brought there
    top1 = (p.argmax(-1) == q.argmax(-1)).float().mean().item()
    return top1, torch.minimum(p, q).sum(-1).mean().item()


def repeated_share(prompt, tokens, n=4):
    """The share of the new tokens that complete an n-gram seen before (in the prompt or earlier in
    the output): 0 for fresh text, near 1 for a loop."""
    if not len(tokens):
        raise ValueError("repeated_share needs at least one new token")
    n = whole(n, "n (the n-gram length)")
    seq = [whole(t, "each token id (text: encode it first)", 0) for t in [*prompt, *tokens]]
    hits = 0  # ids as ints: a tensor's items hash by identity
    seen = {tuple(seq[i:i + n]) for i in range(len(prompt) - n + 1)}
    for t in range(len(prompt), len(seq)):
        gram = tuple(seq[t - n + 1:t + 1])
        hits += len(gram) == n and gram in seen
        seen.add(gram)
    return hits / len(tokens)
