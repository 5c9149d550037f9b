"""Shared fixtures: tiny random GPTs, exact laws, and a chi-square check, all with fixed seeds.

Two checks of losslessness run through the suite, and both must also *reject* lossy setups
(negative controls), so we know they can fail:
  * exact: `exact_law(fn)` runs the package's own code once per outcome of its random draws and
    returns the exact law of what it returns; `target_law` is the law plain sampling from the
    target gives (the target alone, enumerated). Lossless means the two are equal (float64).
  * statistical: counts from many seeded runs against that law, with Pearson's chi-square.

The helpers live in minispec.kit.checks (the notebooks use them too).
Helpers are handed out as fixtures (not imported) so the suite works under any pytest import mode.
"""
import importlib
import os

import pytest
import torch

import minispec as ms
from minispec.kit.checks import chi2_pvalue as _chi2_pvalue
from minispec.kit.checks import dense as _dense
from minispec.kit.checks import exact_law as _exact_law
from minispec.kit.checks import target_law as _target_law

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


@pytest.fixture(scope="session")
def optional():
    """optional(module) -> the module: an extra CI installs (transformers, accelerate) is imported,
    and a missing one fails where MINISPEC_REQUIRE_REAL is set (CI), else the test skips saying so
    (pytest.importorskip alone skipped in CI too, silently)."""
    def need(module):
        if os.environ.get("MINISPEC_REQUIRE_REAL"):
            return importlib.import_module(module)
        return pytest.importorskip(module, reason=f"{module} is not installed: pip install "
                                   f"-e '.[hf,real]' enables this test")
    return need


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
