"""Shared fixtures: tiny random GPTs, exact laws, and a chi-square check, all with fixed seeds.

Two checks of losslessness run through the suite, and both must also *reject* lossy setups
(negative controls), so we know they can fail:
  * exact: `exact_law(fn)` runs the package's own code once per outcome of its random draws and
    returns the exact law of what it returns; `target_law` is the law plain sampling from the
    target gives (the target alone, enumerated). Lossless means the two are equal (float64).
  * statistical: counts from many seeded runs against that law, with Pearson's chi-square.

Helpers are handed out as fixtures (not imported) so the suite works under any pytest import mode.
"""
import itertools

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


class _Coin:
    """What torch.rand(()) returns inside exact_law: `coin < a` is a branch point, True with
    probability a."""

    def __init__(self, choose):
        self.choose = choose

    def __lt__(self, a):
        a = min(1.0, max(0.0, float(a)))
        return self.choose([1.0 - a, a]) == 1


def _exact_law(fn):
    """The exact law of fn()'s (hashable) result: {result: probability} in float64.

    fn is the package's own code, run once per outcome of its random draws: every draw of
    torch.multinomial(p, n, replacement) and every comparison `torch.rand(()) < a` is a branch
    point, explored depth first with its probability (p / p.sum(), or a and 1 - a). Draws without
    replacement zero each drawn id's weight for the next draw (and, as torch does, raise if fewer
    than n ids have weight). Any other use of the generator fails loudly (the patched functions
    return no tensor to draw from).
    """
    law, todo = {}, [[]]
    real = torch.rand, torch.multinomial
    while todo:
        forced, taken, weight = todo.pop(), [], [1.0]

        def choose(w):
            w = [float(x) for x in w]
            if len(taken) < len(forced):
                c = forced[len(taken)]
            else:
                options = [i for i, x in enumerate(w) if x > 0]
                todo.extend(taken + [i] for i in options[1:])
                c = options[0]
            taken.append(c)
            weight[0] *= w[c] / sum(w)
            return c

        def rand(*size, generator=None, **kw):
            if size not in ((), ((),)):
                raise NotImplementedError(f"exact_law: torch.rand{size}")
            return _Coin(choose)

        def multinomial(p, n, replacement=False, generator=None):
            if p.dim() != 1:
                raise NotImplementedError("exact_law: 1-d p only")
            w, out = p.tolist(), []
            if not replacement and n > sum(x > 0 for x in w):
                raise RuntimeError("exact_law: fewer ids with weight than draws (no replacement)")
            for _ in range(n):
                out.append(choose(w))
                if not replacement:
                    w = [0.0 if i == out[-1] else x for i, x in enumerate(w)]
            return torch.tensor(out, dtype=torch.long)

        torch.rand, torch.multinomial = rand, multinomial
        try:
            out = fn()
        finally:
            torch.rand, torch.multinomial = real
        law[out] = law.get(out, 0.0) + weight[0]
    return law


def _dense(law, V, m):
    """{tuple of m tokens: probability} -> a (V,) * m float64 tensor."""
    out = torch.zeros((V,) * m, dtype=torch.float64)
    for seq, prob in law.items():
        out[tuple(seq)] += prob
    return out


@torch.no_grad()
def _target_law(model, prompt, m, temperature=1.0, top_k=None, top_p=None):
    """P(x_1..x_m | prompt) of plain sampling from `model`, every sequence enumerated: (V,) * m,
    float64.
    Each factor is ms.probs of the target's own logits (float64), as generate samples from."""
    V = model.config.vocab_size
    seqs = torch.tensor(list(itertools.product(range(V), repeat=m)))  # (V^m, m)
    x = torch.cat([torch.tensor(prompt).expand(len(seqs), -1), seqs], 1)
    p = ms.probs(model(x)[:, len(prompt) - 1:-1].double(), temperature, top_k, top_p)  # (V^m, m, V)
    return p.gather(-1, seqs[..., None])[..., 0].prod(-1).view((V,) * m)


@pytest.fixture(scope="session")
def random_gpt():
    """Factory: random_gpt(vocab_size=..., n_layer=..., seed=...) -> a GPT in eval mode."""
    return _random_gpt


@pytest.fixture(scope="session")
def chi2_pvalue():
    """chi2_pvalue(counts, expected_probs) -> p-value (0.0 if an impossible cell was observed)."""
    return _chi2_pvalue


@pytest.fixture(scope="session")
def exact_law():
    """exact_law(fn) -> {result: probability}: fn's random draws (torch.multinomial, torch.rand)
    enumerated."""
    return _exact_law


@pytest.fixture(scope="session")
def dense():
    """dense(law, V, m) -> the law of m-token tuples as a (V,) * m float64 tensor."""
    return _dense


@pytest.fixture(scope="session")
def target_law():
    """target_law(model, prompt, m, temperature=1.0, top_k=None, top_p=None) -> (V,) * m float64
    tensor."""
    return _target_law


@pytest.fixture(scope="session")
def byte_pair():
    """A target (2 layers) and a draft made of the target's first layer: they agree often but not
    always, so speculative rounds accept anything from 0 to gamma drafts."""
    target = _random_gpt(vocab_size=256, n_layer=2, n_head=2, n_embd=32, block_size=64, seed=1,
                         std=0.3)
    with torch.no_grad():  # a weaker last block keeps the target close to its first layer
        for name, p in target.named_parameters():
            if name.startswith("h.1.") and "c_proj" in name:
                p.mul_(0.3)
    draft = ms.GPT(ms.GPTConfig(vocab_size=256, n_layer=1, n_head=2, n_embd=32, block_size=64))
    first = {k: v for k, v in target.state_dict().items() if not k.startswith("h.1.")}
    draft.load_state_dict(first)
    return target, draft.eval()


@pytest.fixture(scope="session")
def tiny_pair():
    """Vocabulary 3, block 16: the target's law over a few new tokens has few outcomes, computable
    exactly;
    a target with 2 layers (so early exit has a layer to skip) and a 1-layer draft unlike it."""
    cfg = dict(vocab_size=3, n_head=1, n_embd=16, block_size=16, std=0.8)
    return _random_gpt(n_layer=2, seed=7, **cfg), _random_gpt(n_layer=1, seed=8, **cfg)


@pytest.fixture(scope="session")
def shipped():
    """The shipped target (loaded once for the session)."""
    return ms.load_model("target")


@pytest.fixture(scope="session")
def script():
    """script(name) -> the module scripts/<name>.py or benchmarks/<name>.py (tooling outside the
    package)."""
    import importlib
    import sys
    from pathlib import Path

    for folder in ("benchmarks", "scripts"):
        path = str(Path(__file__).resolve().parents[1] / folder)
        if path not in sys.path:
            sys.path.insert(0, path)
    return importlib.import_module
