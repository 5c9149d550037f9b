"""The "rows" kernel of bridge/linear.py: x W^T through row_kernel.cpp, which reads each weight
from memory once for all the rows (its comment says how), compiled at the first use by
torch.utils.cpp_extension: it needs a C++ compiler (g++ or clang) and ninja (`pip install ninja`,
in the `[real]` extra), takes about 20 s, and is then cached by torch for this machine.
Example: product(torch.randn(4, 576), pack(torch.randn(1536, 576))).shape == (4, 1536)"""
import platform
from pathlib import Path

import torch

BLOCK = 64     # W's outputs are packed in blocks of 64 (row_kernel.cpp's B)
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
    """rows (M, K) @ W^T -> (M, N), from W packed by `pack`."""
    return extension().product(rows, packed)
