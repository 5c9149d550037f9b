"""minispec GPT <-> transformers GPT2LMHeadModel (minispec.bridge.hf, formerly scripts/hf.py),
checked against transformers itself.

The state-dict layout and round trip need only torch. Then randomly initialised models of several
shapes, no downloads: the same logits, the same greedy continuations, and the same tokens as
transformers' assisted generation; skipped when the optional extra is not installed
(pip install minispec[hf]).
"""
import pytest
import torch

import minispec as ms


@pytest.fixture(scope="module")
def hf():
    from minispec.bridge import hf
    return hf


@pytest.fixture(scope="module")
def transformers(optional):
    return optional("transformers")


SHAPES = [dict(vocab_size=50, n_layer=1, n_head=1, n_embd=8, block_size=32),
          dict(vocab_size=97, n_layer=3, n_head=2, n_embd=24, block_size=48),
          dict(vocab_size=256, n_layer=2, n_head=4, n_embd=32, block_size=64)]


def gpt(seed, std=0.3, **shape):
    """Weights ~ N(0, std) (larger than GPT-2's init) so that the logits are far from uniform."""
    m, g = ms.GPT(ms.GPTConfig(**shape)), torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, std, generator=g)
    return m.eval()


def test_hf_state_dict_layout(hf):
    """Key names and Conv1D (in, out) shapes of transformers' GPT2LMHeadModel, written out by
    hand."""
    C, V, L = 16, 50, 32
    model = gpt(0, vocab_size=V, n_layer=2, n_head=2, n_embd=C, block_size=L)
    sd = hf.to_hf_state_dict(model)
    want = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (L, C),
            "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,),
            "lm_head.weight": (V, C)}
    for i in range(2):
        h = f"transformer.h.{i}."
        want.update({h + "ln_1.weight": (C,), h + "ln_1.bias": (C,),
                     h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
                     h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
                     h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
                     h + "mlp.c_fc.weight": (C, 4 * C), h + "mlp.c_fc.bias": (4 * C,),
                     h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,)})
    assert {k: tuple(v.shape) for k, v in sd.items()} == want
    c_attn = sd["transformer.h.0.attn.c_attn.weight"]
    assert torch.equal(c_attn, model.h[0].attn.c_attn.weight.t())


def test_hf_state_dict_roundtrip(hf):
    """Back again, every weight exactly; HF's causal-mask buffers are ignored (but not the c_attn
    biases, whose names also end in "attn.bias"); the tied head may be left out."""
    model = gpt(0, vocab_size=50, n_layer=2, n_head=2, n_embd=16, block_size=32)
    sd = hf.to_hf_state_dict(model)
    sd["transformer.h.0.attn.bias"] = torch.ones(1, 1, 32, 32)
    sd["transformer.h.1.attn.masked_bias"] = torch.tensor(-1e4)
    back = hf.from_hf_state_dict(sd, model.config)
    assert not back.training
    for k, v in model.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    idx = torch.randint(0, 50, (1, 8), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert torch.equal(back(idx), model(idx))
        del sd["lm_head.weight"]
        assert torch.equal(hf.from_hf_state_dict(sd, model.config)(idx), model(idx))


def shape_id(s):
    return f"V{s['vocab_size']}-L{s['n_layer']}-C{s['n_embd']}"


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@torch.inference_mode()
def test_identical_logits_both_directions(hf, transformers, shape):
    m = gpt(0, **shape)
    hf_m = hf.to_hf(m)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, shape["vocab_size"], (3, shape["block_size"]), generator=g)
    ours = m(x)  # (B, T, V)
    torch.testing.assert_close(hf_m(x).logits, ours, atol=1e-5, rtol=1e-5)
    # with minispec's KV cache, fed in two pieces
    cache = m.new_cache(batch_size=3)
    pieces = torch.cat([m(x[:, :5], cache), m(x[:, 5:], cache)], dim=1)
    torch.testing.assert_close(pieces, ours, atol=1e-5, rtol=1e-5)
    # back again: every weight survives the round trip
    back = hf.from_hf(hf_m)
    for (k, a), (_, b) in zip(m.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k
    # and a model initialised by transformers converts too
    hf2 = transformers.GPT2LMHeadModel(hf_m.config).eval()
    torch.testing.assert_close(hf.from_hf(hf2)(x), hf2(x).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES[1:], ids=lambda s: f"V{s['vocab_size']}-L{s['n_layer']}")
@torch.inference_mode()
def test_identical_greedy_continuations(hf, transformers, shape):
    target = gpt(0, **shape)
    draft = gpt(1, **shape)
    with torch.no_grad():  # a draft near the target, so that rounds keep 0 to gamma drafts
        for p, t in zip(draft.parameters(), target.parameters()):
            p.mul_(0.3).add_(t)
    hf_target, hf_draft = hf.to_hf(target), hf.to_hf(draft)
    calls = [0]
    hf_target.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    for seed in range(2):
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(0, shape["vocab_size"], (1, 7), generator=g)
        n = 24
        ours = ms.generate(target, prompt[0].tolist(), n).tokens
        kw = dict(max_new_tokens=n, do_sample=False, pad_token_id=0,
                  attention_mask=torch.ones_like(prompt))
        assert hf_target.generate(prompt, **kw)[0, 7:].tolist() == ours
        # transformers reads the draft length from the assistant's own generation config
        c = hf_draft.generation_config
        c.num_assistant_tokens = 3
        c.num_assistant_tokens_schedule = "constant"
        c.assistant_confidence_threshold = 0.0
        calls[0] = 0
        assisted = hf_target.generate(prompt, assistant_model=hf_draft, **kw)
        assert assisted[0, 7:].tolist() == ours
        res = ms.speculative_generate(target, draft, prompt[0].tolist(), n, gamma=3)
        assert res.tokens == ours
        assert res.stats.target_calls == calls[0]  # the same rounds, one target call each


def test_rejects_other_architectures(hf, transformers):
    config = transformers.GPT2Config(vocab_size=10, n_positions=8, n_embd=8, n_layer=1, n_head=2,
                                     activation_function="relu")
    with pytest.raises(ValueError, match="activation_function"):
        hf.from_hf(transformers.GPT2LMHeadModel(config))
