"""The "rows" kernel of bridge/linear.py: x W^T through row_kernel.cpp, which reads each weight
from memory once for all the rows (its comment says how), compiled at the first use by
torch.utils.cpp_extension: it needs a C++ compiler (g++ or clang) and ninja (`pip install ninja`,
in the `[real]` extra), takes about 20 s, and is then cached by torch for this machine.
Example: product(torch.randn(4, 576), pack(torch.randn(1536, 576))).shape == (4, 1536)"""
import platform
from pathlib import Path

import torch

BLOCK = 64     # W's outputs are packed in blocks of 64 (row_kernel.cpp's B)
GROUP = 32     # inputs sharing a code's scale (and minimum), as in SmolLM2's file (its G)
_extension = None


def extension():
    """row_kernel.cpp, compiled once (where it cannot be, a RuntimeError says what is missing)."""
    global _extension
    if _extension is None:
        from torch.utils.cpp_extension import load
        flags = ["-O3", "-march=native", "-fopenmp", "-ffp-contract=fast"]
        if platform.machine().lower() in ("x86_64", "amd64"):
            flags.append("-mprefer-vector-width=512")  # x86: 16 floats a register where it can
        try:
            _extension = load("minispec_rows", [str(Path(__file__).with_name("row_kernel.cpp"))],
                              extra_cflags=flags, extra_ldflags=["-fopenmp"])
        except Exception as error:  # no ninja (RuntimeError), no compiler (a build error), ...
            raise RuntimeError(f"the rows kernel is compiled at its first use and needs a C++ "
                               f"compiler (g++ or clang) and ninja (pip install ninja); choose "
                               f"another kernel otherwise: {error}") from error
    return _extension


def fits(rows, weight):
    """Whether the rows kernel computes rows (M, K) @ W^T: float32 on the CPU, and W's outputs a
    whole number of blocks (SmolLM2's all are)."""
    return (weight.shape[0] % BLOCK == 0 and weight.device.type == "cpu"
            and rows.dtype == weight.dtype == torch.float32)


def pack(weight):
    """W (N, K) -> (N / 64, K, 64): each block of 64 outputs one contiguous slab, k-major."""
    return extension().pack(weight.detach())


def product(rows, packed):
    """rows (M, K) @ W^T -> (M, N), from W packed by `pack` or by `compact` (codes, d, m)."""
    if isinstance(packed, tuple):
        return extension().product_codes(rows, *packed)
    return extension().product(rows, packed)


def compact(weight):
    """W (N, K) as row_kernel.cpp's codes where they give every weight to the bit: 4-bit codes c
    with a scale d (an fp16 value) and a minimum m per 32 inputs, w = d c + m (Q4_1), or 8-bit
    codes with a scale, w = d c (Q8_0), as SmolLM2's file stores them -> (codes, d, m; m empty for
    8 bits) in slabs of 64 outputs; None where neither is exact (`pack`'s float32 slabs then).
    Example: compact(torch.ones(64, 32))[0].shape == (1, 32, 32) (4-bit codes, all 0), and
    compact(torch.randn(64, 32)) is None"""
    N, K = weight.shape
    if N % BLOCK or K % GROUP or weight.dtype != torch.float32 or weight.device.type != "cpu":
        return None
    w = weight.detach().reshape(N, K // GROUP, GROUP)
    low, high = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    for bits in (4, 8):
        if bits == 4:  # c = 0 at the block's minimum, 15 at its maximum
            d, m = ((high - low) / 15).half().float(), low
            c = torch.where(d > 0, (w - low) / d, 0).round().clamp(0, 15)
        else:  # |c| = 127 at the block's largest |w|
            d, m = torch.maximum(high, -low) / 127, torch.zeros_like(low)
            c = torch.where(d > 0, w / d, 0).round().clamp(-127, 127)
        if torch.equal((c * d + m).view(torch.int32), w.view(torch.int32)):  # d c exact: bits
            return layout(c, d, m if bits == 4 else None)
    return None


def slabs(t):
    """(N, K / 32, g) -> (N / 64, K / 32 * g, 64): each block of 64 outputs one slab, k-major."""
    N = t.shape[0]
    return t.reshape(N // BLOCK, BLOCK, -1).transpose(1, 2).contiguous()


def layout(c, d, m):
    """Codes (N, K / 32, 32) and their d, m (N, K / 32, 1) -> row_kernel.cpp's layout: 4-bit
    codes two to a byte, (N / 64, K, 32), a slab's vectors 0 and 2 in the low halves, 1 and 3 in
    the high; 8-bit codes (N / 64, K, 64) (m None: empty); d and m (N / 64, K / 32, 64)."""
    if m is None:
        return slabs(c.to(torch.int8)), slabs(d), torch.empty(0)
    v = slabs(c.to(torch.uint8))
    v = v.reshape(*v.shape[:2], 4, 16)  # a slab's 4 vectors of 16 outputs at each input
    return (v[:, :, 0::2] | (v[:, :, 1::2] << 4)).reshape(*v.shape[:2], 32), slabs(d), slabs(m)
