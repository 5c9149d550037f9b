"""Shared fixtures: tiny random GPTs and a chi-square check, all with fixed seeds.

Helpers are handed out as fixtures (not imported) so the suite works under any pytest import mode.
"""
import pytest
import scipy.stats
import torch

import minispec as ms

torch.set_num_threads(1)  # the project trains its models on the same 2 cores: be polite


def _random_gpt(vocab_size=256, n_layer=2, n_head=2, n_embd=32, block_size=64, seed=0, std=0.5):
    """A random GPT whose weights come from a private generator (the global RNG is untouched).

    GPT-2's own init (std 0.02) gives near-uniform next-token distributions, which would make every
    statistical check weak; std ~0.5 gives peaked, varied distributions instead.
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = ms.GPT(ms.GPTConfig(vocab_size=vocab_size, n_layer=n_layer, n_head=n_head,
                                    n_embd=n_embd, block_size=block_size))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name:  # LayerNorm: keep the scale near 1, the shift near 0
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g) if name.endswith("weight")
                        else 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.normal_(0.0, std, generator=g)
    return model.eval()


def _chi2_pvalue(counts, expected_probs, min_expected=5.0):
    """p-value of Pearson's chi-square test that `counts` were drawn from `expected_probs`.

    Cells with probability 0 must never be observed (if one is, the p-value is 0: impossible
    outcome). Cells expecting fewer than `min_expected` counts are pooled into one cell so that
    the chi-square approximation holds.
    """
    counts = torch.as_tensor(counts, dtype=torch.float64).flatten()
    probs_ = torch.as_tensor(expected_probs, dtype=torch.float64).flatten()
    assert counts.shape == probs_.shape
    assert abs(float(probs_.sum()) - 1) < 1e-6, "expected probabilities must sum to 1"
    if (counts[probs_ <= 1e-12] > 0).any():
        return 0.0
    counts, probs_ = counts[probs_ > 1e-12], probs_[probs_ > 1e-12]
    probs_ = probs_ / probs_.sum()  # float32 inputs are off by ~1e-7; scipy wants equal totals
    n = counts.sum()
    small = probs_ * n < min_expected
    if small.any():
        counts = torch.cat([counts[~small], counts[small].sum(0, keepdim=True)])
        probs_ = torch.cat([probs_[~small], probs_[small].sum(0, keepdim=True)])
    if len(counts) < 2:
        return 1.0
    return float(scipy.stats.chisquare(counts.numpy(), (probs_ * n).numpy()).pvalue)


@pytest.fixture(scope="session")
def random_gpt():
    """Factory: random_gpt(vocab_size=..., n_layer=..., seed=...) -> a GPT in eval mode."""
    return _random_gpt


@pytest.fixture(scope="session")
def chi2_pvalue():
    """chi2_pvalue(counts, expected_probs) -> p-value (0.0 if an impossible cell was observed)."""
    return _chi2_pvalue


@pytest.fixture(scope="session")
def byte_pair():
    """A target (2 layers) and a draft made of the target's first layer: they agree often but not
    always, so speculative rounds accept anything from 0 to gamma drafts."""
    target = _random_gpt(vocab_size=256, n_layer=2, n_head=2, n_embd=32, block_size=64, seed=1, std=0.3)
    with torch.no_grad():  # a weaker last block keeps the target close to its first layer
        for name, p in target.named_parameters():
            if name.startswith("h.1.") and "c_proj" in name:
                p.mul_(0.3)
    draft = ms.GPT(ms.GPTConfig(vocab_size=256, n_layer=1, n_head=2, n_embd=32, block_size=64))
    draft.load_state_dict({k: v for k, v in target.state_dict().items() if not k.startswith("h.1.")})
    return target, draft.eval()
