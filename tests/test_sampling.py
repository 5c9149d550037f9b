"""probs (temperature, top-k, top-p) and sample: the distribution that both p and q come from."""
import math

import pytest
import torch

import minispec as ms


def logits_of(p):
    return torch.tensor(p).log()


def random_logits(shape, seed=0):
    return 3 * torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kw", [dict(), dict(temperature=0.5), dict(temperature=2.0), dict(top_k=1),
                                dict(top_k=5), dict(top_p=0.3), dict(top_p=0.9),
                                dict(top_k=10, top_p=0.8), dict(temperature=0.0),
                                dict(temperature=0.7, top_k=3, top_p=0.5)])
def test_rows_sum_to_one(kw):
    p = ms.probs(random_logits((2, 3, 50)), **kw)
    assert p.shape == (2, 3, 50)
    assert (p >= 0).all()
    assert torch.allclose(p.sum(-1), torch.ones(2, 3), atol=1e-6)


def test_temperature_scales_logits():
    logits = random_logits((4, 20), seed=1)
    assert torch.allclose(ms.probs(logits), torch.softmax(logits, -1), atol=1e-7)
    want = torch.softmax(logits / 0.5, -1)
    assert torch.allclose(ms.probs(logits, temperature=0.5), want, atol=1e-7)


def test_temperature_zero_is_one_hot_argmax():
    logits = random_logits((5, 30), seed=2)
    # top-k/top-p cannot change the argmax
    p = ms.probs(logits, temperature=0.0, top_k=3, top_p=0.5)
    assert torch.equal(p, torch.nn.functional.one_hot(logits.argmax(-1), 30).float())
    # ties: lowest id
    assert ms.probs(torch.tensor([0.0, 2.0, 2.0]), temperature=0).tolist() == [0.0, 1.0, 0.0]
    # docstring
    assert ms.probs(torch.tensor([0.0, 1.0, 2.0]), temperature=0).tolist() == [0.0, 0.0, 1.0]


@pytest.mark.parametrize("k", [1, 2, 7, 49, 50, 80])
def test_top_k_keeps_the_k_largest(k):
    logits = random_logits((3, 50), seed=3)
    p = ms.probs(logits, top_k=k)
    kk = min(k, 50)
    assert ((p > 0).sum(-1) == kk).all()
    top = logits.topk(kk, -1).indices
    assert torch.equal(p.gather(-1, top) > 0, torch.ones(3, kk, dtype=torch.bool))
    restricted = torch.full_like(logits, -math.inf).scatter(-1, top, logits.gather(-1, top))
    assert torch.allclose(p, torch.softmax(restricted, -1), atol=1e-7)


@pytest.mark.parametrize("top_p, kept", [(0.4, [1.0, 0, 0, 0]),
                                         (0.5, [1.0, 0, 0, 0]),
                                         (0.75, [0.625, 0.375, 0, 0]),
                                         (0.85, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0]),
                                         (0.99, [0.5, 0.3, 0.15, 0.05]),
                                         (1.0, [0.5, 0.3, 0.15, 0.05])])
def test_top_p_known_answer(top_p, kept):
    """p = [.5, .3, .15, .05] (sorted by likelihood). The smallest set of most likely tokens whose
    mass reaches top_p: 0.4 or 0.5 -> {.5}; 0.75 -> {.5, .3} (mass .8), renormalized to
    [.625, .375]; 0.85 -> {.5, .3, .15} (mass .95); 0.99 -> all four.
    The vocabulary order is shuffled to check the result lands back on the right ids."""
    order = [2, 0, 3, 1]  # vocab id of the 1st, 2nd, 3rd, 4th most likely token
    p_vocab = torch.zeros(4)
    p_vocab[order] = torch.tensor([0.5, 0.3, 0.15, 0.05])
    want = torch.zeros(4)
    want[order] = torch.tensor(kept)
    assert torch.allclose(ms.probs(p_vocab.log(), top_p=top_p), want, atol=1e-6)


@pytest.mark.parametrize("top_p", [0.2, 0.6, 0.95])
def test_top_p_keeps_each_rows_own_nucleus(top_p):
    """Rows of a batch (B, T, V), each in its own vocabulary order: a token is kept iff the tokens
    strictly more likely than it hold less than top_p (read straight off the definition, one
    token at a time), and the kept ones are renormalized."""
    logits = random_logits((3, 2, 12), seed=5)
    full = torch.softmax(logits, -1)
    more_likely = (full[..., None, :] > full[..., :, None]) * full[..., None, :]  # (..., V, V)
    kept = torch.where(more_likely.sum(-1) < top_p, full, 0.0)
    assert torch.allclose(ms.probs(logits, top_p=top_p), kept / kept.sum(-1, keepdim=True),
                          atol=1e-6)


def test_top_k_then_top_p():
    """Hugging Face's order: top-k first. p = [.4, .3, .2, .1], top_k=2 -> [4/7, 3/7]; then
    top_p=0.5 keeps only 4/7 >= 0.5 -> [1, 0, 0, 0]. (top-p first would keep {.4, .3}.)"""
    p = ms.probs(logits_of([0.4, 0.3, 0.2, 0.1]), top_k=2, top_p=0.5)
    assert torch.allclose(p, torch.tensor([1.0, 0, 0, 0]), atol=1e-6)


@pytest.mark.parametrize("kw, match", [(dict(temperature=-1.0), "temperature"),
                                       (dict(temperature=None), "temperature"),
                                       (dict(top_k=0), "top_k"), (dict(top_k=-3), "top_k"),
                                       (dict(top_k=1.5), "top_k"),
                                       (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
                                       (dict(top_p=-0.2), "top_p")])
def test_bad_sampling_args(kw, match):
    with pytest.raises(ValueError, match=match):
        ms.probs(torch.zeros(4), **kw)


def test_sample_uses_the_generator(chi2_pvalue):
    p = torch.tensor([0.1, 0.0, 0.6, 0.3])
    def draws(seed, n=50):
        gen = torch.Generator().manual_seed(seed)
        return [ms.sample(p, gen) for _ in range(n)]

    assert draws(3) == draws(3) and draws(3) != draws(4)
    gen = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([ms.sample(p, gen) for _ in range(2000)]), minlength=4)
    assert counts[1] == 0
    assert chi2_pvalue(counts, p) > 1e-4


def test_probs_keeps_float64_and_lifts_half_precision():
    """float64 logits stay float64 (a float64 model decodes exactly); fp16/bf16 are softmaxed in
    float32."""
    logits = random_logits((3, 10), seed=4)
    assert ms.probs(logits.double(), top_p=0.9).dtype == torch.float64
    assert ms.probs(logits.double(), temperature=0).dtype == torch.float64
    for dtype in (torch.float16, torch.bfloat16):
        p = ms.probs(logits.to(dtype), temperature=0.7)
        assert p.dtype == torch.float32 and torch.allclose(p.sum(-1), torch.ones(3))
