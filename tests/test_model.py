"""The GPT (minispec.model): logits at every position, a KV cache that crops, keeps a path and
follows the weights' dtype, explicit positions and masks, blocks run a layer at a time (early
exits), features, bytes, saving (scripts/training.py) and loading."""
import copy

import pytest
import torch

import minispec as ms
from minispec.model import WEIGHTS_DIR, KVCache, decode


@pytest.fixture(autouse=True)
def _inference():
    with torch.no_grad():  # every test here is inference
        yield


@pytest.fixture(scope="module")
def model(random_gpt):
    return random_gpt(vocab_size=50, n_layer=2, n_head=2, n_embd=16, block_size=32, seed=0)


def tokens(n, seed=0, V=50):
    return torch.randint(0, V, (1, n), generator=torch.Generator().manual_seed(seed))


# --- logits at every position -------------------------------------------------------------------

def test_logits_at_every_position(model):
    idx = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(1))
    logits = model(idx)
    assert logits.shape == (3, 7, 50)
    for t in range(7):  # position t sees tokens up to t only (causal): a shorter run's logits
        assert torch.allclose(logits[:, t], model(idx[:, :t + 1])[:, -1], atol=1e-5)


def test_overflowing_block_size_raises(model):
    with pytest.raises(ValueError, match="block_size"):
        model(tokens(33))
    cache = model.new_cache()
    model(tokens(30), cache)
    with pytest.raises(ValueError, match="block_size"):
        model(tokens(3), cache)


def test_n_head_must_divide_n_embd():
    with pytest.raises(ValueError, match="divisible"):
        ms.GPT(ms.GPTConfig(vocab_size=4, n_layer=1, n_head=3, n_embd=8))


# --- the KV cache -------------------------------------------------------------------------------

@pytest.mark.parametrize("chunks", [[1] * 12, [5, 7], [3, 1, 4, 1, 3], [12]])
def test_cached_chunks_equal_one_full_forward(model, chunks):
    idx = tokens(12, seed=2)
    full = model(idx)
    cache, outs, start = model.new_cache(), [], 0
    for c in chunks:
        outs.append(model(idx[:, start:start + c], cache))
        start += c
    assert cache.length == 12
    assert torch.allclose(torch.cat(outs, 1), full, atol=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_cache_after_crop_equals_fresh_forward(model, seed):
    """Draft-verify-rollback cycles: after every crop the cache holds exactly the committed tokens,
    so what is computed next equals a fresh forward over committed + new tokens."""
    gen = torch.Generator().manual_seed(seed)
    cache, committed = model.new_cache(), tokens(3, seed=seed)[0].tolist()
    model(torch.tensor([committed]), cache)
    for _ in range(5):
        g = int(torch.randint(1, 5, (), generator=gen))
        drafted = torch.randint(0, 50, (g,), generator=gen).tolist()
        model(torch.tensor([drafted]), cache)  # the verify pass writes g speculative positions
        keep = int(torch.randint(0, g + 1, (), generator=gen))
        committed += drafted[:keep]
        cache.crop(len(committed))  # roll back the rejected ones
        assert cache.length == len(committed)
        new = torch.randint(0, 50, (2,), generator=gen).tolist()
        got = model(torch.tensor([new]), cache)[0]
        want = model(torch.tensor([committed + new]))[0, -2:]
        assert torch.allclose(got, want, atol=1e-5)
        committed += new


def test_crop_validates(model):
    cache = model.new_cache()
    model(tokens(4), cache)
    with pytest.raises(ValueError, match="crop"):
        cache.crop(5)
    with pytest.raises(ValueError, match="crop"):
        cache.crop(-1)
    cache.crop(0)
    assert torch.allclose(model(tokens(4), cache), model(tokens(4)), atol=1e-5)


def test_keep_moves_a_path_next_to_the_context():
    """keep(start, nodes): entries start + i for i in nodes move to start, start + 1, ...; the
    rest is cropped."""
    cfg = ms.GPTConfig(vocab_size=4, block_size=8, n_layer=2, n_head=1, n_embd=2)
    cache = KVCache(cfg, size=12)
    cache.k[:] = torch.arange(12.0).view(1, 1, 1, 12, 1)  # entry j holds the value j
    cache.v[:] = -cache.k
    cache.length = 10  # a context of 4 entries, then 6 tree nodes
    cache.keep(4, [1, 3, 4])
    assert cache.length == 7
    assert cache.k[0, 0, 0, :7, 0].tolist() == [0, 1, 2, 3, 5, 7, 8]
    assert torch.equal(cache.v[:, :, :, :7], -cache.k[:, :, :, :7])
    cache.keep(7, [])
    assert cache.length == 7


def test_blocks_write_at_start_and_advance_the_cache(model):
    """GPT.blocks writes the T new entries at `start` (default: cache.length) and sets the cache's
    length to start + T: whoever runs blocks advances the cache."""
    idx, more = tokens(5, seed=7), tokens(2, seed=8)
    full = model(torch.cat([idx, more], 1))
    cache = model.new_cache()
    h = model.blocks(model.embed(idx, torch.arange(5)), cache)
    assert cache.length == 5
    assert torch.allclose(model.lm_head(model.ln_f(h)), full[:, :5], atol=1e-5)
    assert torch.allclose(model(more, cache), full[:, 5:], atol=1e-5)  # default start: length
    assert cache.length == 7
    # an explicit start overwrites from there (entries 5, 6 again) and the length follows it
    h = model.blocks(model.embed(more, torch.arange(5, 7)), cache, start=5)
    assert cache.length == 7
    assert torch.allclose(model.lm_head(model.ln_f(h)), full[:, 5:], atol=1e-5)
    cache.length = 9  # junk at 7, 8: start=5 ignores it and drops it
    h = model.blocks(model.embed(more[:, :1], torch.arange(5, 6)), cache, start=5)
    assert cache.length == 6
    assert torch.allclose(model.lm_head(model.ln_f(h)), full[:, 5:6], atol=1e-5)
    with pytest.raises(ValueError, match="KV cache holds 4"):
        model(tokens(5), model.new_cache(size=4))
    with pytest.raises(ValueError, match="block_size"):  # a big cache: no position past the block
        model(tokens(5), model.new_cache(size=200), pos=torch.arange(30, 35))


def test_features_are_what_the_head_reads(model):
    """GPT.features is ln_f(h_N): the head of it is forward's logits, with and without a cache."""
    idx = tokens(8, seed=6)
    f = model.features(idx)
    assert f.shape == (1, 8, 16)
    assert torch.allclose(model.lm_head(f), model(idx), atol=1e-6)
    h = model.blocks(model.embed(idx, torch.arange(8)))
    assert torch.allclose(f, model.ln_f(h), atol=1e-6)
    cache = model.new_cache()
    parts = torch.cat([model.features(idx[:, :3], cache), model.features(idx[:, 3:], cache)], 1)
    assert cache.length == 8 and torch.allclose(parts, f, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_cache_and_forward_follow_the_dtype(model, dtype):
    """new_cache takes the weights' device and dtype: model.double() (or .to("cuda")) just works."""
    m = copy.deepcopy(model).to(dtype)
    cache = m.new_cache(batch_size=2, size=40)
    assert cache.k.dtype == cache.v.dtype == dtype and cache.k.device == m.wte.weight.device
    assert cache.k.shape == (2, 2, 2, 40, 8) and model.new_cache().k.shape[3] == 32
    idx, cache = tokens(6, seed=9), m.new_cache()
    pieces = torch.cat([m(idx[:, :4], cache), m(idx[:, 4:], cache)], 1)
    exact = dtype == torch.float64
    assert pieces.dtype == dtype and torch.allclose(pieces, m(idx), atol=1e-12 if exact else 0.1)
    assert torch.allclose(pieces.float(), model(idx), atol=1e-5 if exact else 0.2)


# --- explicit positions and masks (tree attention) ----------------------------------------------

def test_explicit_causal_mask_equals_default(model):
    idx = tokens(9, seed=3)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    assert torch.allclose(model(idx, pos=torch.arange(9), mask=causal), model(idx), atol=1e-5)
    cache = model.new_cache()  # with 4 tokens cached: a (5, 9) mask over cached + new keys
    model(idx[:, :4], cache)
    mask = torch.ones(5, 9, dtype=torch.bool).tril(diagonal=4)
    got = model(idx[:, 4:], cache, pos=torch.arange(4, 9), mask=mask)
    assert torch.allclose(got, model(idx)[:, 4:], atol=1e-5)


def test_tree_mask_scores_every_branch_in_one_pass(model):
    """Prefix [a b c] cached; tree nodes d, e (both children of c) and f (child of d), fed as one
    chunk [d e f] with positions [3 3 4]. Each node's logits equal those of its own linear path."""
    a, b, c, d, e, f = 1, 2, 3, 4, 5, 6
    cache = model.new_cache()
    model(torch.tensor([[a, b, c]]), cache)
    #                  a  b  c  d  e  f
    mask = torch.tensor([[1, 1, 1, 1, 0, 0],   # d sees the prefix and itself
                         [1, 1, 1, 0, 1, 0],   # e sees the prefix and itself, not its sibling d
                         [1, 1, 1, 1, 0, 1]],  # f sees the prefix, its parent d, itself
                        dtype=torch.bool)
    got = model(torch.tensor([[d, e, f]]), cache, pos=torch.tensor([3, 3, 4]), mask=mask)[0]
    assert torch.allclose(got[0], model(torch.tensor([[a, b, c, d]]))[0, -1], atol=1e-5)
    assert torch.allclose(got[1], model(torch.tensor([[a, b, c, e]]))[0, -1], atol=1e-5)
    assert torch.allclose(got[2], model(torch.tensor([[a, b, c, d, f]]))[0, -1], atol=1e-5)


def test_blocks_one_layer_at_a_time_give_every_exit(model, script):
    """Early exits: blocks(x, layers=[l]) one block at a time, through the shared ln_f and head,
    give the logits after each block; the last exit is forward's, exit 1 that of the first block
    alone (a 1-layer GPT with the same weights). scripts/training.py's exit_logits does the same."""
    idx = tokens(6, seed=4)
    x, exits = model.embed(idx, torch.arange(6)), []
    for layer in range(2):
        x = model.blocks(x, layers=[layer])
        exits.append(model.lm_head(model.ln_f(x)))
    shallow = ms.GPT(ms.GPTConfig(vocab_size=50, n_layer=1, n_head=2, n_embd=16, block_size=32))
    shallow.load_state_dict({k: v for k, v in model.state_dict().items()
                             if not k.startswith("h.1.")})
    assert torch.allclose(exits[-1], model(idx), atol=1e-6)
    assert torch.allclose(exits[0], shallow.eval()(idx), atol=1e-6)
    assert not torch.allclose(exits[0], exits[1], atol=1e-3)  # the second block does change them
    cache = model.new_cache()  # a cache: each layer's call writes its own layer only
    model.blocks(model.embed(idx, torch.arange(6)), cache, layers=[0])
    assert cache.length == 6 and cache.k[1].abs().sum() == 0 and cache.k[0].abs().sum() > 0
    scripted = script("training").exit_logits(model, idx)
    assert len(scripted) == 2
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(scripted, exits))


# --- bytes --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "def fib(n):\n    return n", "h\xe9llo \u2603 \U0001f40d",
                                  "\x00\x7f"])
def test_encode_decode_roundtrip(text):
    ids = ms.encode(text)
    assert isinstance(ids, list) and all(isinstance(i, int) and 0 <= i < 256 for i in ids)
    assert decode(ids) == text


def test_encode_known_answer():
    assert ms.encode("hi") == [104, 105]
    assert ms.encode("\xe9") == [0xC3, 0xA9]


@pytest.mark.parametrize("ids", [[0xFF], [0x68, 0xC3], [0xE2, 0x82], [0x80, 0x61]])
def test_decode_invalid_utf8_gives_replacement_char(ids):
    text = decode(ids)
    assert "\ufffd" in text
    assert decode(torch.tensor(ids)) == text  # tensors of ids work too


def test_decode_is_the_public_function():
    """`ms.decode` is the byte decoder of the API contract (no submodule shadows it: test_api)."""
    assert ms.decode is decode
    assert ms.decode([104, 105]) == "hi"
    assert ms.decode([0xFF]) == "\ufffd"


# --- saving and loading -------------------------------------------------------------------------

def test_save_load_roundtrip(model, tmp_path, script):
    path = tmp_path / "tiny.pt"
    script("training").save_model(model, path, data="random", steps=0)  # scripts/, not the package
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["card"] == {"data": "random", "steps": 0}
    assert all(v.dtype == torch.float16 for v in ckpt["state_dict"].values())  # stored in fp16
    for loaded in (ms.load_model(str(path)), ms.load_model(path)):
        assert not loaded.training and loaded.config == model.config
        assert all(p.dtype == torch.float32 for p in loaded.parameters())
        assert loaded.lm_head.weight is loaded.wte.weight  # still tied
        for k, v in model.state_dict().items():
            assert torch.equal(loaded.state_dict()[k], v.half().float()), k
        idx = tokens(10, seed=5)
        assert torch.allclose(loaded(idx), model(idx), atol=0.05)  # fp16 rounding only


def test_load_unknown_model_raises(tmp_path):
    with pytest.raises(ValueError, match="unknown model"):
        ms.load_model("no-such-model")
    with pytest.raises(ValueError, match="unknown model"):
        ms.load_model(str(tmp_path / "missing.pt"))


@pytest.mark.parametrize("name", ["target", "draft"])
def test_shipped_model_loads(name):
    assert (WEIGHTS_DIR / f"{name}.pt").exists(), "the shipped weights are part of the package"
    m = ms.load_model(name)
    assert not m.training and m.config.vocab_size == 256
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in m.parameters())
    assert m(torch.tensor([ms.encode("def ")])).shape == (1, 4, 256)


def test_a_full_block_fits_and_one_more_token_does_not(random_gpt):
    m = random_gpt(vocab_size=4, block_size=8)
    assert m(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, 4)
    with pytest.raises(ValueError, match="exceeds block_size=8"):
        m(torch.zeros(1, 9, dtype=torch.long))
