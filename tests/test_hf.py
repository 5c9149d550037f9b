"""minispec GPT <-> transformers GPT2LMHeadModel (minispec.hf), checked against transformers itself.

Randomly initialised models of several shapes, no downloads: the same logits, the same greedy
continuations, and the same tokens as transformers' assisted generation. Skipped when the
optional extra is not installed (pip install minispec[hf]).
"""
import pytest
import torch

transformers = pytest.importorskip("transformers")

import minispec as ms  # noqa: E402
from minispec.hf import from_hf, to_hf  # noqa: E402

SHAPES = [dict(vocab_size=50, n_layer=1, n_head=1, n_embd=8, block_size=32),
          dict(vocab_size=97, n_layer=3, n_head=2, n_embd=24, block_size=48),
          dict(vocab_size=256, n_layer=2, n_head=4, n_embd=32, block_size=64)]


def random_gpt(seed, std=0.3, **shape):
    """Weights ~ N(0, std) (larger than GPT-2's init) so that the logits are far from uniform."""
    torch.manual_seed(seed)
    m = ms.GPT(ms.GPTConfig(**shape))
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, std)
    return m.eval()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"V{s['vocab_size']}-L{s['n_layer']}-C{s['n_embd']}")
@torch.inference_mode()
def test_identical_logits_both_directions(shape):
    m = random_gpt(0, **shape)
    hf = to_hf(m)
    x = torch.randint(0, shape["vocab_size"], (3, shape["block_size"]), generator=torch.Generator().manual_seed(1))
    ours = m(x)  # (B, T, V)
    torch.testing.assert_close(hf(x).logits, ours, atol=1e-5, rtol=1e-5)
    # with minispec's KV cache, fed in two pieces
    cache = m.new_cache(batch_size=3)
    pieces = torch.cat([m(x[:, :5], cache), m(x[:, 5:], cache)], dim=1)
    torch.testing.assert_close(pieces, ours, atol=1e-5, rtol=1e-5)
    # back again: every weight survives the round trip
    back = from_hf(hf)
    for (k, a), (_, b) in zip(m.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k
    # and a model initialised by transformers converts too
    hf2 = transformers.GPT2LMHeadModel(hf.config).eval()
    torch.testing.assert_close(from_hf(hf2)(x), hf2(x).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES[1:], ids=lambda s: f"V{s['vocab_size']}-L{s['n_layer']}")
@torch.inference_mode()
def test_identical_greedy_continuations(shape):
    target = random_gpt(0, **shape)
    draft = random_gpt(1, **shape)
    with torch.no_grad():  # a draft near the target, so that rounds keep 0 to gamma drafts
        for p, t in zip(draft.parameters(), target.parameters()):
            p.mul_(0.3).add_(t)
    hf_target, hf_draft = to_hf(target), to_hf(draft)
    calls = [0]
    hf_target.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    for seed in range(2):
        prompt = torch.randint(0, shape["vocab_size"], (1, 7), generator=torch.Generator().manual_seed(seed))
        n = 24
        ours = ms.generate(target, prompt[0].tolist(), n).tokens
        kw = dict(max_new_tokens=n, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt))
        assert hf_target.generate(prompt, **kw)[0, 7:].tolist() == ours
        # transformers reads the draft length from the assistant's own generation config
        c = hf_draft.generation_config
        c.num_assistant_tokens, c.num_assistant_tokens_schedule, c.assistant_confidence_threshold = 3, "constant", 0.0
        calls[0] = 0
        assisted = hf_target.generate(prompt, assistant_model=hf_draft, **kw)
        assert assisted[0, 7:].tolist() == ours
        res = ms.speculative_generate(target, draft, prompt[0].tolist(), n, gamma=3)
        assert res.tokens == ours
        assert res.stats["target_calls"] == calls[0]  # the same rounds, one target call each


def test_rejects_other_architectures():
    config = transformers.GPT2Config(vocab_size=10, n_positions=8, n_embd=8, n_layer=1, n_head=2,
                                     activation_function="relu")
    with pytest.raises(ValueError, match="activation_function"):
        from_hf(transformers.GPT2LMHeadModel(config))
