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
    1, 2, 3, 5 or 8 threads give the same bits."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(576, 96, generator=g)
    x = torch.randn(9, 96, generator=g)
    packed = row_kernel.pack(w)
    before, outs = torch.get_num_threads(), []
    try:
        for threads in (1, 2, 3, 5, 8):  # 8: shares start at odd vectors
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


def coded(n_out, n_in, bits, g):
    """A weight as SmolLM2's file makes one: per 32 inputs, fp16 d (and m), w = d c + m with 4-bit
    codes spanning 0..15 (Q4_1), or w = d c with 8-bit codes reaching +-127 (Q8_0)."""
    blocks = (n_out, n_in // 32, 1)
    d = (torch.rand(blocks, generator=g) * 0.01 + 1e-4).half().float()
    if bits == 4:
        c = torch.randint(0, 16, (n_out, n_in // 32, 32), generator=g).float()
        c[..., 0], c[..., 1] = 0, 15  # the quantizer's minimum and maximum
        m = (torch.randn(blocks, generator=g) * 0.05).half().float()
        return (c * d + m).reshape(n_out, n_in)
    c = torch.randint(-127, 128, (n_out, n_in // 32, 32), generator=g).float()
    c[..., 5] = 127 * torch.where(torch.rand(blocks[:2], generator=g) < 0.5, 1, -1)
    return (c * d).reshape(n_out, n_in)


def test_codes_give_the_slabs_bits_in_fewer_bytes():
    """compact finds the codes a Q4_1 or Q8_0 weight came from, and the product from them equals
    the float32 slabs' bit for bit (the same weights, summed in the same order), for any number
    of rows and of threads; it stores 4-bit codes in 0.75 bytes a weight (d, m included)."""
    g = torch.Generator().manual_seed(4)
    before = torch.get_num_threads()
    try:
        for bits, n_out, n_in in [(4, 576, 96), (4, 192, 576), (8, 576, 96), (8, 128, 64)]:
            w = coded(n_out, n_in, bits, g)
            codes, d, m = row_kernel.compact(w)
            assert codes.dtype == (torch.uint8 if bits == 4 else torch.int8)
            assert codes.numel() == n_out * n_in * bits // 8 and d.numel() == n_out * n_in // 32
            assert m.numel() == (d.numel() if bits == 4 else 0)
            dense = row_kernel.pack(w)
            for threads in (1, 2, 3, 8):  # 8: shares of 576 outputs start at odd vectors
                torch.set_num_threads(threads)
                for rows in (1, 2, 5, 7, 13, 19, 40):  # 19, 40: rebuilt once as float32
                    x = torch.randn(rows, n_in, generator=g)
                    want = row_kernel.product(x, dense)
                    assert torch.equal(row_kernel.product(x, (codes, d, m)), want)
    finally:
        torch.set_num_threads(before)


def test_compact_refuses_what_its_codes_would_change():
    """Random float32 weights, a coded one with one bit flipped, and shapes off the slabs: None
    (Linear then multiplies by the float32 slabs), never an approximation."""
    g = torch.Generator().manual_seed(5)
    assert row_kernel.compact(torch.randn(64, 32, generator=g)) is None
    for bits in (4, 8):
        w = coded(64, 64, bits, g)
        assert row_kernel.compact(w) is not None
        w.view(torch.int32)[3, 7] ^= 1  # one weight off by one unit in its last place
        assert row_kernel.compact(w) is None
    assert row_kernel.compact(coded(64, 64, 4, g)[:, :48]) is None  # inputs not blocks of 32
    assert row_kernel.compact(coded(128, 64, 4, g)[:100]) is None  # outputs not slabs of 64


def test_linear_under_compact_equals_rows_bit_for_bit():
    """kernel("compact") multiplies a coded W from its codes and any other W from the slabs of
    "rows": the same bits as "rows" either way."""
    g = torch.Generator().manual_seed(6)
    for weight, stored in [(coded(128, 64, 4, g), tuple), (torch.randn(128, 64, generator=g),
                                                           torch.Tensor)]:
        layer = linear.Linear(64, 128)
        with torch.no_grad():
            layer.weight.copy_(weight)
        x = torch.randn(1, 9, 64, generator=g)
        with torch.inference_mode():
            with linear.kernel("rows"):
                want = layer(x)
            with linear.kernel("compact"):
                got = layer(x)
        assert isinstance(layer._packed, stored) and layer._packed_from[2] == "compact"
        assert torch.equal(got, want)
