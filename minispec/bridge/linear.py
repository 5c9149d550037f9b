"""The linear layer of minispec's Llama: the same sum as torch's nn.Linear, through a faster kernel.

How much a verification call costs, v(k) in units of a one-token step, is a property of the
kernels as well as of the hardware. Three kernels for the same y = x W^T, measured with SmolLM2 on
a 2-core CPU, 2 threads, across runs (figures/real_model.md, figures/lookup_ceiling.md):
- torch's nn.Linear (MKL): its one-token product (a matrix-vector product, gemv) ran on one of the
  two cores, 1.70-2.0 times the packed step, and its x W^T over 2 to 4 tokens cost 1.6 to 1.7 steps
  (figures/real_model_2threads.md); on another CPU, an Intel Xeon with AMX, it made the faster
  one-token step: 0.57 times the packed one in figures/real_model_intel.md, 50-53 ms against
  56-65 ms timed by hand, so the default below is not the fastest kernel on every CPU;
- "columns": the same sum as (W X^T)^T through MKL, one token fed as two columns: 0.88 to
  1.25 steps up to 4 tokens, but 1.6-2.1 for 8 and 2.3-3.3 for 12 (on the Intel Xeon: flat up
  to 16 tokens, v(16) 1.09, but from an 82.2 ms step);
- "packed", the default: oneDNN, with the weight packed once, at the first call, into its own
  blocked layout: a step no slower on those runs' CPU, v(8) 1.15-1.5 and v(16) 1.43-2.1, and a
  prompt's forward in about half the steps (figures/lookup_ceiling.md's p: 3.6-6.6 across runs,
  against 9.7-12.0 with "columns"). The curve of a memory-bound model: the extra tokens reuse
  the weights already read, so 8 tokens cost 1.15-1.5 steps, not 8.
- "transposed": x @ W^T with W^T stored once, row-major (in, out), through MKL's product: on the
  Intel Xeon it made the cheapest one-token step and the cheapest call over 4 tokens of all of
  them (by hand, step_costs at context 300: 21.0 and 28.9 ms, against 29.3 and 34.6 packed and
  21.8 and 31.0 with nn.Linear), and greedy decoding 1.24x faster than the packed default at the
  copy prompts' median (figures/kernel_baseline_transposed.md); not measured on the other CPU,
  so not the default.
- "rows": row_kernel.py's compiled product, which reads each weight from memory once for all the
  tokens. On the Intel Xeon a one-token step as fast as nn.Linear's, and v(4) 1.13 where
  "transposed" read 1.34 (figures/lookup_ceiling_rows.md and lookup_ceiling_intel.md): the
  memory-bound curve a verification call should have. On an AMD EPYC the fastest one-token step
  of the kernels timed by hand, greedy decoding 1.25x faster than "packed"
  (figures/kernel_baseline_amd.md), and a prompt's products 2.6-3 times faster than MKL's (150
  tokens: 65.5 ms against 171-193, by hand).
  It needs a C++ compiler and ninja (row_kernel.py).
- "compact": the rows kernel reading W as SmolLM2's file stores it, 4-bit codes with a scale and
  a minimum per 32 weights (the embedding's: 8-bit codes and a scale), each weight rebuilt exactly
  in registers: the same bits as "rows" from 0.75 bytes a weight (the embedding's 1.125) instead
  of 4 (row_kernel.py's
  `compact` checks every weight first, and keeps "rows"' float32 slabs for any W its codes would
  change). On a second Intel Xeon (family 6, model 167) greedy decoding ran 2.18x faster than
  "packed" and 1.77x faster than "rows" at the copy median (figures/kernel_baseline_compact.md,
  the kernel's first version); there the products of a one-token step took 7.5-8.2 ms against 23.8
  through "rows" (by hand), so the rest of a forward (attention, norms, Python: 8-12 ms) is now the
  larger part, and it grows with the tokens: v(4) 1.16-1.20 (figures and by hand) where "rows"
  read 1.11 (figures/real_model_intel2_rows.md; 1.07-1.13 by hand).
Off the CPU the default is nn.Linear's own product (cuBLAS on a GPU): on one H200, SmolLM2's
shape took 29.8-30.5 ms a one-token step with it and 30.8-52.4 ms with "columns", which also made
one token dearer than 2 to 16 (figures/real_model_gpu.md, measured before this default; "columns"
is still there to choose).
The packed copy is a second copy of the weights in memory (with SmolLM2 the resident memory grew
by 526 MiB over its first decode, measured once by hand with psutil). Where oneDNN is missing, the
weight is not float32 on the CPU, or autograd needs the product, Linear computes "columns", the
same sum.
"""
import weakref
from contextlib import contextmanager

import torch
import torch.nn as nn

from . import row_kernel

KERNELS = ("packed", "columns", "torch", "mixed", "transposed", "rows", "compact")
_kernel = "packed"  # what every Linear computes now (see `kernel`)
_packing_works = None  # None: not tried yet; then whether oneDNN packed and multiplied here


def packing_works():
    """Whether this torch can pack a weight for oneDNN and multiply with it (tried once)."""
    global _packing_works
    if _packing_works is None:
        try:
            w = torch.ones(3, 2)
            packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
            y = torch.ops.mkldnn._linear_pointwise(torch.ones(1, 2), packed, None, "none", [], "")
            _packing_works = bool(torch.equal(y, torch.full((1, 3), 2.0)))
        except (AttributeError, RuntimeError, NotImplementedError):
            _packing_works = False
    return _packing_works


def torch_product(x, weight):
    """Whether the kernel now computes x W^T with nn.Linear's own forward: "torch" always, "mixed"
    for one token (a gemv), "rows" where its product does not fit (not float32, outputs not a
    multiple of 64), the others but "columns" off the CPU."""
    if _kernel == "torch" or (_kernel == "mixed" and x.numel() == x.shape[-1]):
        return True
    if _kernel in ("rows", "compact"):
        return not row_kernel.fits(x.reshape(-1, x.shape[-1]), weight)
    return _kernel != "columns" and x.device.type != "cpu"


def pack(w, how):
    """W (out, in) in the layout kernel `how` multiplies by: oneDNN's blocks ("packed"), W^T
    row-major ("transposed") or slabs of 64 outputs, (out / 64, in, 64) ("rows")."""
    if how == "rows":
        return row_kernel.pack(w)
    if how == "compact":  # its codes where they give W to the bit, else the slabs of "rows"
        return row_kernel.compact(w) or row_kernel.pack(w)
    if how == "transposed":
        return w.t().contiguous()
    return torch.ops.mkldnn._reorder_linear_weight(w, None)


class Linear(nn.Linear):
    """nn.Linear without a bias: y = x W^T, through oneDNN on a packed copy of W (see the module's
    docstring; kernel("transposed"): x @ a stored W^T), else as (W X^T)^T with X's rows the
    tokens, at least two of them (one token goes in as two identical columns, never a gemv); off
    the CPU, nn.Linear's own product.
    Example: Linear(576, 1536)(torch.randn(1, 4, 576)).shape == (1, 4, 1536)"""

    def __init__(self, in_features, out_features, bias=False, **kwargs):
        if bias:
            raise ValueError("Linear has no bias (Llama's linear layers have none); use nn.Linear")
        super().__init__(in_features, out_features, bias=False, **kwargs)
        self._packed, self._packed_from = None, None

    def forward(self, x):
        if x.shape[-1] != self.in_features:  # oneDNN's own message names no shape
            raise ValueError(f"Linear takes inputs (..., {self.in_features}), got {tuple(x.shape)}")
        if torch_product(x, self.weight):  # "torch"; "mixed", one token; a GPU's cuBLAS; ...
            return super().forward(x)
        rows = x.reshape(-1, x.shape[-1]).contiguous()  # (N, in): one token a row
        packed = self.packed_weight(x) if _kernel != "columns" else None
        if packed is not None and _kernel in ("transposed", "rows", "compact"):  # W^T; slabs
            y = rows @ packed if _kernel == "transposed" else row_kernel.product(rows, packed)
        elif packed is not None:
            y = torch.ops.mkldnn._linear_pointwise(rows, packed, None, "none", [], "")
        else:
            pad = rows.repeat(2, 1) if len(rows) == 1 else rows  # one token: two columns
            y = (self.weight @ pad.t()).t()[:len(rows)].contiguous()  # (N, out), row-major
        return y.reshape(*x.shape[:-1], y.shape[-1])

    def packed_weight(self, x):
        """W in oneDNN's layout (W^T row-major for "transposed", slabs for "rows"), packed at the
        first call and again only when W or the kernel has changed (another tensor, new data
        through W.data = ..., or written in place); None where the kernel does not apply.
        Not seen (the old copy stays): a write in place to a W made under inference_mode (no
        version counter) or through W.data (a counter of its own); write under no_grad instead."""
        w = self.weight
        grad = torch.is_grad_enabled() and (w.requires_grad or x.requires_grad)
        how = _kernel if _kernel in ("transposed", "rows", "compact") else "packed"  # layout
        if grad or w.device.type != "cpu" or w.dtype != x.dtype:
            return None
        if how == "packed" and not (w.dtype == torch.float32 and packing_works()):
            return None  # W^T for MKL: any dtype; rows: float32 (torch_product checked); oneDNN
        version = (w.data_ptr(), None if w.is_inference() else w._version)  # W.data = new: moved
        made = self._packed_from  # (a weak reference to the W packed, its version, how), or None
        # W is known by object, not by address: a new W can take a freed one's, at version 0
        if made is None or made[0]() is not w or made[1:] != (version, how):
            self._packed = pack(w.detach(), how)
            self._packed_from = (weakref.ref(w), version, how)
        return self._packed

    def _apply(self, fn, *args, **kwargs):
        """model.to(...), .half(), .float() swap W's data without a new version: pack again."""
        self._packed, self._packed_from = None, None
        return super()._apply(fn, *args, **kwargs)

    def __getstate__(self):
        """Copied or saved without the packed copy (oneDNN's layout has no storage to copy): the
        copy packs its own at its first call."""
        state = self.__dict__.copy()
        state["_packed"], state["_packed_from"] = None, None
        return state


@contextmanager
def kernel(name):
    """Inside `with kernel(name):` every Linear computes its product with kernel `name`: "packed"
    (the default), "columns", "torch" (nn.Linear's own forward, a gemv for one token), "mixed"
    (nn.Linear's for one token, packed for more), "transposed" (x @ W^T, W^T stored: the fastest
    one-token step on the Intel Xeon of figures/real_model_intel.md, benchmarks/kernel_baseline.py),
    "rows" (row_kernel.py's compiled product) or "compact" (the same from the file's 4-bit codes),
    to time kernels on one model."""
    global _kernel
    if name not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {name!r}")
    before, _kernel = _kernel, name
    try:
        yield
    finally:
        _kernel = before


def torch_kernel():
    """`with torch_kernel():` is `with kernel("torch"):`."""
    return kernel("torch")
