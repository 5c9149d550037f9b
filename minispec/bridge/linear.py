"""The linear layer of minispec's Llama: the same sum as torch's nn.Linear, through a faster kernel.

How much a verification call costs, v(k) in units of a one-token step, is a property of the
kernels as well as of the hardware. Measured with SmolLM2 on a 2-core CPU (figures/real_model.md,
benchmarks/real_model.py): torch's nn.Linear computes x W^T, and MKL ran its one-token product (a
matrix-vector product, gemv) on one of the two cores, 37-39 ms a step, and its x W^T over 2 to 4
tokens at 1.5 to 1.7 steps. The same sum as (W X^T)^T over 2 to 4 columns cost 1.0 to 1.3 steps,
and a one-token step fed as two columns took 21-22 ms.
"""
from contextlib import contextmanager

import torch.nn as nn


class Linear(nn.Linear):
    """nn.Linear without a bias, y = x W^T computed as (W X^T)^T with X's rows the tokens, at
    least two of them: a single token goes in as two identical columns, never a gemv.
    Example: Linear(576, 1536)(torch.randn(1, 4, 576)).shape == (1, 4, 1536)"""

    def __init__(self, in_features, out_features, bias=False, **kwargs):
        if bias:
            raise ValueError("Linear has no bias (Llama's linear layers have none); use nn.Linear")
        super().__init__(in_features, out_features, bias=False, **kwargs)

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1]).contiguous()  # (N, in): each token's column contiguous
        pad = rows.repeat(2, 1) if len(rows) == 1 else rows  # one token: two columns, not a gemv
        y = (self.weight @ pad.t()).t()[:len(rows)].contiguous()  # (N, out), row-major again
        return y.reshape(*x.shape[:-1], y.shape[-1])


@contextmanager
def torch_kernel():
    """Inside `with torch_kernel():` every Linear runs nn.Linear's own forward (x W^T, a gemv for
    one token), to time the two kernels on the same model."""
    forward = Linear.forward
    Linear.forward = nn.Linear.forward
    try:
        yield
    finally:
        Linear.forward = forward
