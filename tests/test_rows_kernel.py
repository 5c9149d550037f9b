"""The "rows" kernel (minispec/bridge/row_kernel.cpp, compiled at its first use): the same sum as
x W^T, row for row whatever the number of rows, and the loop on a Llama through it equal to greedy
decoding. It needs a C++ compiler and ninja (the `[real]` extra); without them these tests skip
and say so, except where MINISPEC_REQUIRE_REAL is set (CI), where they must run."""
import os

import pytest
import torch

import minispec as ms
from minispec.bridge import linear, row_kernel
from minispec.bridge.llama import Llama, LlamaConfig

try:
    row_kernel.extension()
except RuntimeError as error:
    if os.environ.get("MINISPEC_REQUIRE_REAL"):
        raise
    pytestmark = pytest.mark.skip(reason=f"the rows kernel does not build here: {error}"[:300])


def test_the_product_is_x_w_transposed_for_any_number_of_rows():
    g = torch.Generator().manual_seed(0)
    for n_out, n_in in [(64, 3), (192, 576), (1536, 576), (576, 1536)]:
        w = torch.randn(n_out, n_in, generator=g)
        packed = row_kernel.pack(w)
        assert packed.shape == (n_out // 64, n_in, 64)
        for m in (1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 17, 40):
            x = torch.randn(m, n_in, generator=g)
            want = x.double() @ w.double().t()
            got = row_kernel.product(x, packed)
            assert got.dtype == torch.float32 and got.shape == (m, n_out)
            assert (got.double() - want).abs().max() < 1e-4 * (1 + want.abs().max())


def test_the_product_is_batch_invariant():
    """Row i of a call equals that row alone, bit for bit: every output is summed over the inputs
    in the same order for any number of rows (MKL's product makes no such promise)."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(576, 96, generator=g)  # 9 slabs: the threads' shares split one
    x = torch.randn(40, 96, generator=g)
    packed = row_kernel.pack(w)
    alone = torch.cat([row_kernel.product(x[i:i + 1], packed) for i in range(len(x))])
    assert torch.equal(row_kernel.product(x, packed), alone)  # 6 rows a pass, 7 passes
    assert torch.equal(row_kernel.product(x[2:13], packed), alone[2:13])  # 6 rows, then 5
    assert torch.equal(row_kernel.product(x[3:7], packed), alone[3:7])  # one pass


def test_the_product_is_the_same_for_any_number_of_threads():
    """The threads share the outputs by vectors of 16, so a share can start or end inside a slab
    (576 outputs are 36 vectors in 9 slabs): every output is still summed in the same order, and
    1, 2, 3 or 5 threads give the same bits."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(576, 96, generator=g)
    x = torch.randn(9, 96, generator=g)
    packed = row_kernel.pack(w)
    before, outs = torch.get_num_threads(), []
    try:
        for threads in (1, 2, 3, 5):
            torch.set_num_threads(threads)
            outs.append(row_kernel.product(x, packed))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(outs[0], out) for out in outs[1:])


def test_linear_under_rows_falls_back_where_it_does_not_fit():
    """A prompt of 70 tokens goes through the kernel; outputs not a multiple of 64, float64 or
    autograd through nn.Linear's product: the same sum either way."""
    g = torch.Generator().manual_seed(2)
    for n_out, tokens, dtype in [(128, 3, torch.float32), (128, 70, torch.float32),
                                 (100, 3, torch.float32), (128, 3, torch.float64)]:
        layer = linear.Linear(32, n_out).to(dtype)
        x = torch.randn(1, tokens, 32, generator=g, dtype=dtype)
        with linear.kernel("rows"), torch.inference_mode():
            got = layer(x)
        assert (got - x @ layer.weight.detach().t()).abs().max() < 1e-5
        fits = n_out % 64 == 0 and dtype == torch.float32  # the 70 tokens too: no row limit
        assert (layer._packed_from is not None) == fits  # the kernel packs W only where it ran
    layer = linear.Linear(32, 128)
    with linear.kernel("rows"):
        layer(torch.randn(2, 32)).sum().backward()  # autograd: nn.Linear's, which has a gradient
    assert layer.weight.grad.shape == (128, 32)


def test_the_loop_on_a_llama_through_rows_equals_greedy_decoding():
    """A float32 Llama whose products all fit the kernel (widths and vocabulary multiples of 64):
    speculative decoding with prompt lookup and with a drafted tree equals generate, token for
    token, under kernel("rows")."""
    config = LlamaConfig(vocab_size=128, block_size=96, n_layer=2, n_head=2, n_kv_head=1,
                         n_embd=128, n_hidden=192, rope_base=100.0)  # key/value outputs: 64
    torch.manual_seed(0)
    model = Llama(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" not in name and "ln_f" not in name:
                p.normal_(0.0, 0.5)
    prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    with linear.kernel("rows"):
        want = ms.generate(model, prompt, 40).tokens
        for drafter, gamma in [(ms.load_drafter("lookup", model), 4),
                               (ms.Lookahead(model), 6)]:
            assert ms.speculative_generate(model, drafter, prompt, 40, gamma=gamma).tokens == want
    x = torch.tensor([prompt + want[:6]])  # 16 tokens: the kernel's product in every layer
    with torch.inference_mode(), linear.kernel("rows"):
        through_rows = model(x)
    layers = [m for m in model.modules() if isinstance(m, linear.Linear)]
    assert layers and all(m._packed_from[2] == "rows" for m in layers)  # every product: the kernel
    with torch.inference_mode(), linear.kernel("transposed"):
        through_mkl = model(x)
    assert all(m._packed_from[2] == "transposed" for m in layers)  # MKL's, here
    assert (through_rows - through_mkl).abs().max() < 1e-3  # one model, through either kernel
