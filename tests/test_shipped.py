"""The shipped models and every shipped drafting method, by name (ms.load_drafter), on the real
target.

With each method: temperature 0 gives exactly generate's tokens (several prompts and gammas), and
temperature 1 is lossless on the REAL pair: the joint law of the first two new tokens, computed
from the shipped target alone (log-softmax, every pair enumerated), against the counts of seeded
runs through speculative_generate (chi-square, small cells pooled). A lossy rule on the same pair
is caught. Also: a float64 target decodes with every method (made float64 before or after
load_drafter), and the demo (python -m minispec, minispec.kit.demo) runs.
"""
import copy

import pytest
import torch

import minispec as ms
from minispec.verify import typical_accept

METHODS = ["draft", "draft_distilled", "lookup", "priced", "early_exit", "medusa", "hydra",
           "eagle"]
PROMPTS = ([ms.encode("def fib(n):"), ms.encode("self.a = a\n        self.")]
           + ms.data.prompts(2, length=64))


@pytest.fixture(scope="module")
def references(shipped):
    return {tuple(p): ms.generate(shipped, p, 32).tokens for p in PROMPTS}


@pytest.mark.parametrize("name", ["target", "draft", "draft_distilled", "draft_onpolicy"])
def test_shipped_models_load(name):
    m = ms.load_model(name)
    assert not m.training and m.config.vocab_size == 256 and m.config.block_size == 256
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in m.parameters())
    with torch.no_grad():
        assert m(torch.tensor([ms.encode("def ")])).shape == (1, 4, 256)


@pytest.mark.parametrize("name", METHODS)
def test_greedy_equals_generate(shipped, references, name):
    drafter, kept = ms.load_drafter(name, shipped), 0
    assert isinstance(drafter, ms.Drafter)
    for prompt in PROMPTS:
        for gamma in (1, 4, 8):
            res = ms.speculative_generate(shipped, drafter, prompt, 32, gamma=gamma)
            assert res.tokens == references[tuple(prompt)], (prompt, gamma)
            kept += sum(s.accepted for s in res.steps)
    assert kept > 0  # (the method drafted tokens the target kept)


PROMPT = ms.encode("self.a = self.")  # spread next-byte laws, and prompt lookup has a match ("a")
N_RUNS = 500


@pytest.fixture(scope="module")
def two_token_law(shipped):
    """P(x1, x2 | PROMPT) at temperature 1, from the shipped target alone: (256, 256), float64."""
    with torch.no_grad():
        lp1 = torch.log_softmax(shipped(torch.tensor([PROMPT]))[0, -1].double(), -1)  # (V,)
        after = shipped(torch.tensor([PROMPT + [x] for x in range(256)]))[:, -1]
        lp2 = torch.log_softmax(after.double(), -1)  # (V, V)
    return (lp1[:, None] + lp2).exp()


def two_token_counts(target, drafter, n, **kw):
    """Counts of the first two new tokens of n seeded runs. 3 new tokens, so a draft is verified for
    x1 or x2 in every method: model and lookup drafters draft in the first round, heads and EAGLE
    (which need the target's features first) in the second."""
    counts = torch.zeros(256, 256)
    for seed in range(n):
        x1, x2, _ = ms.speculative_generate(target, drafter, PROMPT, 3, gamma=4, temperature=1.0,
                                            seed=seed, **kw).tokens
        counts[x1, x2] += 1
    return counts


@pytest.mark.parametrize("name", METHODS)
def test_sampling_is_lossless_on_the_real_pair(shipped, two_token_law, chi2_pvalue, name):
    counts = two_token_counts(shipped, ms.load_drafter(name, shipped), N_RUNS)
    assert chi2_pvalue(counts, two_token_law) > 1e-3


def threshold_rule(candidates, q, p, generator=None, tau=0.05):
    """LOSSY (the survey's threshold rule): keep a drafted token the target gives at least tau,
    else sample p."""
    return candidates[0] if p[candidates[0]] >= tau else ms.sample(p, generator)


@pytest.mark.parametrize("name, rule", [("draft", threshold_rule), ("hydra", typical_accept)],
                         ids=["draft, threshold rule", "hydra, typical acceptance"])
def test_a_lossy_rule_is_caught_on_the_real_pair(shipped, two_token_law, chi2_pvalue, name, rule):
    counts = two_token_counts(shipped, ms.load_drafter(name, shipped), 300, rule=rule)
    assert chi2_pvalue(counts, two_token_law) < 1e-6


@pytest.fixture(scope="module")
def shipped64(shipped):
    return copy.deepcopy(shipped).double()


@pytest.mark.parametrize("name", METHODS)
def test_a_float64_target_decodes_with_every_method(shipped64, references, name):
    """model.double() then load_drafter and speculative_generate: the cache and every tensor the
    loop (and the drafter) makes follow the target's dtype. float64 greedy output equals float64
    generate (and here float32's too)."""
    prompt = PROMPTS[1]
    ref = ms.generate(shipped64, prompt, 32).tokens
    assert ref == references[tuple(prompt)]
    res = ms.speculative_generate(shipped64, ms.load_drafter(name, shipped64), prompt, 32, gamma=4)
    assert res.tokens == ref


@pytest.mark.parametrize("name", METHODS)
def test_model_double_after_load_drafter_decodes(name):
    """load_drafter on the float32 target, THEN target.double(): the heads and the EAGLE head (and
    their caches) follow the target's dtype in reset, since they read its features; a model
    drafter's own network stays float32 (load_drafter makes it follow the target it is GIVEN:
    tests/test_review_27b.py), its q's still verify exactly. The output equals float64 generate."""
    target = ms.load_model("target")
    drafter = ms.load_drafter(name, target)
    target.double()
    prompt = ms.encode("def f(x):\n    ")
    res = ms.speculative_generate(target, drafter, prompt, 8)
    assert res.tokens == ms.generate(target, prompt, 8).tokens and len(res.tokens) == 8
    for heads in (getattr(drafter, "heads", None), getattr(drafter, "head", None)):
        assert heads is None or all(p.dtype == torch.float64 for p in heads.parameters())
    res = ms.speculative_generate(target, drafter, prompt, 8, temperature=1.0)  # sampling runs too
    assert len(res.tokens) == 8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize("name", METHODS)
def test_a_target_on_the_gpu_decodes_with_every_method(shipped64, references, name):
    """model.to("cuda"): the cache, the masks and every tensor the loop and the drafters make
    follow the weights' device (float64 on both sides, so that the GPU's rounding cannot swap
    near-ties)."""
    gpu, prompt = copy.deepcopy(shipped64).to("cuda"), PROMPTS[1]
    ref = ms.generate(shipped64, prompt, 32).tokens
    assert ms.generate(gpu, prompt, 32).tokens == ref
    res = ms.speculative_generate(gpu, ms.load_drafter(name, gpu), prompt, 32, gamma=4)
    assert res.tokens == ref
    res = ms.speculative_generate(gpu, ms.load_drafter(name, gpu), prompt, 8, gamma=4,
                                  temperature=1.0)
    assert len(res.tokens) == 8


def test_distilled_draft_agrees_more(shipped, script):
    """The distilled draft has the draft's shape and agrees with the target more often on held-out
    text (greedy top-1 agreement and 1 - TV, the acceptance proxies)."""
    agreement = script("train").agreement
    draft, distilled = ms.load_model("draft"), ms.load_model("draft_distilled")
    assert vars(distilled.config) == vars(draft.config)
    held = ms.data.heldout()[:16 * 128 + 1]
    plain = agreement(shipped, draft, held, windows=16)
    better = agreement(shipped, distilled, held, windows=16)
    assert better[0] > plain[0] and better[1] > plain[1]


def test_onpolicy_draft_is_aligned_more(shipped):
    """The on-policy draft (scripts/distill_onpolicy.py) has the draft's shape and matches the
    target better on held-out text than the plain and the distilled draft: 1 - TV (what sampled
    acceptance keeps) over 256-byte windows spread across all six files (every position a draft
    meets), and on the first 4 KB in 128-byte windows (the model card's older measure), where the
    issue's bar is 0.76. In the loop, at T = 1, it keeps more of its drafts than the plain draft on
    unseen prompts (a draft trained on short rows only scored well on the first measure and kept
    a fifth as much here)."""
    models = {n: ms.load_model(n) for n in ("draft", "draft_distilled", "draft_onpolicy")}
    assert vars(models["draft_onpolicy"].config) == vars(models["draft"].config)
    spread = {n: ms.data.alignment(shipped, m, windows=16)[1] for n, m in models.items()}
    first = {n: ms.data.alignment(shipped, m, block_size=128, spread=False)[1]
             for n, m in models.items()}
    for measure in (spread, first):
        assert measure["draft_onpolicy"] > max(measure["draft"], measure["draft_distilled"])
    assert first["draft_onpolicy"] >= 0.76
    kept = {}
    for name in ("draft", "draft_onpolicy"):
        runs = [ms.speculative_generate(shipped, models[name], ids, 32, gamma=4, temperature=1.0,
                                        seed=i) for i, ids in enumerate(ms.data.prompts(4))]
        kept[name] = sum(s.accepted for r in runs for s in r.steps) / sum(r.stats.drafted
                                                                         for r in runs)
    assert kept["draft_onpolicy"] > kept["draft"]


def test_the_demo_runs(capsys):
    from minispec.kit.demo import main
    import minispec.__main__  # python -m minispec runs the same main
    assert minispec.__main__.main is main
    main(["def fib(n):", "--drafter", "hydra", "--temperature", "0", "--max-new-tokens", "12",
          "--gamma", "3"])
    out = capsys.readouterr().out
    assert out.startswith("def fib(n):") and "autoregressive" in out and "hydra" in out
    assert "identical to autoregressive greedy output: True" in out
