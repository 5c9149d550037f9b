"""EAGLE (minispec.methods.eagle): a one-block head drafting in the target's feature space.

Greedy output equals plain greedy decoding (the default chain, chains and EAGLE-2 trees grown by
grow_tree, several gammas). Sampling is lossless: on a float64 toy target the exact law of 3 new
tokens through speculative_generate (every random draw of the package enumerated, conftest's
exact_law) equals the target's own law (conftest's target_law), and two lossy setups are caught by
the same check; on float32, seeded runs of 4 new tokens pass a chi-square test against the
target's law and a lossy rule fails it. Bad drafter options raise. The head follows the target's
dtype (model.double() after building the drafter). Training (scripts/train_eagle.py) lowers the
loss and leaves the target untouched; weights survive a save/load; the shipped head beats chance.
"""
import pytest
import torch

import minispec as ms
from minispec.methods import EagleDrafter, EagleHead, load_eagle
from minispec.methods import eagle as eagle_module
from minispec.verify import typical_accept


def random_head(target, seed=0, std=0.4):
    head = EagleHead(target)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if "ln_" not in name:
                p.normal_(0.0, std, generator=g)
    return head.eval()


SHAPES = {"default chain": {},  # EagleDrafter's own loop
          "chain": dict(branching=(1,) * 6), "tree": dict(branching=(3,) * 4, width=3),
          "wide tree": dict(branching=(4, 2, 2, 1), width=None)}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_equals_generate(random_gpt, shape, gamma):
    target = random_gpt(vocab_size=8, n_layer=2, n_head=2, n_embd=16, block_size=64, seed=3,
                        std=0.6)
    drafter, kept = EagleDrafter(random_head(target), **SHAPES[shape]), 0
    for prompt in ([1], [2, 5, 7, 1], [3, 3, 3, 3, 3, 3]):
        ref = ms.generate(target, prompt, 20)
        res = ms.speculative_generate(target, drafter, prompt, 20, gamma=gamma)
        assert res.tokens == ref.tokens
        assert max(len(s.tree.tokens) for s in res.steps) <= gamma
        kept += sum(s.accepted for s in res.steps)
    assert kept > 0  # the random head is sometimes right, so kept drafts are exercised too


def test_a_head_that_knows_the_target_drafts_well():
    """The shipped head (eagle_head.pt ships) on the shipped target: greedy output unchanged, and
    more than 2 tokens per target call on a held-out prompt (a head no better than chance would
    keep few drafts)."""
    target = ms.load_model("target")
    ids = ms.data.prompts(1)[0]
    assert (ms.model.WEIGHTS_DIR / "eagle_head.pt").exists(), "eagle_head.pt ships with the package"
    head = load_eagle(target)
    res = ms.speculative_generate(target, EagleDrafter(head), ids, 40, gamma=8)
    assert res.tokens == ms.generate(target, ids, 40).tokens
    assert res.stats.tokens_per_call > 2.0


LOSSY_TYPICAL = dict(rule=lambda c, q, p, g: typical_accept(c, q, p, g, eps=0.3, delta=0.6))


def argmax_with_soft_q(monkeypatch):
    """BUGGY on purpose: the default chain drafts the head's argmax but reports the soft q it was
    not drawn from."""
    pick = eagle_module.pick

    def greedy_pick(logits, temperature, top_k, top_p, generator):
        token, q = pick(logits, temperature, top_k, top_p, generator)
        return int(q.argmax()), q

    monkeypatch.setattr(eagle_module, "pick", greedy_pick)


@pytest.mark.parametrize("shape, lossy", [("default chain", None), ("small tree", None),
                                          ("default chain", "typical_accept"),
                                          ("default chain", "argmax, soft q")])
def test_sampling_exact_law_and_negative_controls(random_gpt, exact_law, dense, target_law,
                                                  monkeypatch, shape, lossy):
    """float64 vocab-3 target, an untrained head with q far from p, 3 new tokens at temperature 1:
    the exact law of the loop's output (every draw enumerated) is the target's; each lossy setup
    moves it by more than 0.01."""
    target = random_gpt(vocab_size=3, n_layer=2, n_head=1, n_embd=16, block_size=16, seed=5,
                        std=0.3).double()
    shapes = dict(SHAPES, **{"small tree": dict(branching=(2, 2), width=1)})
    drafter = EagleDrafter(random_head(target, seed=2, std=0.5).double(), **shapes[shape])
    kw = dict(rule=typical_accept) if lossy == "typical_accept" else {}
    if lossy == "argmax, soft q":
        argmax_with_soft_q(monkeypatch)
    prompt = [1, 2]
    kept = []

    def run():
        res = ms.speculative_generate(target, drafter, prompt, 3, gamma=3, temperature=1.0, **kw)
        kept.append(sum(s.accepted for s in res.steps))
        return tuple(res.tokens)

    gap = float((dense(exact_law(run), 3, 3) - target_law(target, prompt, 3)).abs().max())
    assert sum(kept) > 0  # some outcomes keep drafts: acceptance is exercised, not only the target
    assert gap > 0.01 if lossy else gap < 1e-12


@pytest.mark.parametrize("shape, rule, lossless", [("default chain", None, True),
                                                    ("chain", None, True), ("tree", None, True),
                                                    ("tree", typical_accept, False)])
def test_sampling_is_lossless_and_a_lossy_rule_is_caught(random_gpt, chi2_pvalue, target_law, shape,
                                                         rule, lossless):
    target = random_gpt(vocab_size=3, n_layer=2, n_head=1, n_embd=16, block_size=16, seed=5,
                        std=0.3)
    # q near p: drafts often kept
    drafter = EagleDrafter(random_head(target, seed=2, std=0.05), **SHAPES[shape])
    prompt, n = [1, 2], 4
    law = target_law(target, prompt, n)
    assert abs(float(law.sum()) - 1) < 1e-5
    kw = {} if rule is None else LOSSY_TYPICAL
    counts = torch.zeros_like(law)
    runs = 2000
    kept = 0
    for seed in range(runs):
        res = ms.speculative_generate(target, drafter, prompt, n, gamma=4, temperature=1.0,
                                      seed=seed, **kw)
        counts[tuple(res.tokens)] += 1
        kept += sum(s.accepted for s in res.steps)
    assert kept > runs / 2  # drafts kept often: the check exercises acceptance, not only the target
    pvalue = chi2_pvalue(counts, law)
    assert (pvalue > 1e-3) if lossless else (pvalue < 1e-6)


@pytest.mark.parametrize("kw, match", [(dict(branching=()), "branching"),
                                       (dict(branching=(0,)), "branching"),
                                       (dict(branching=(2, 0)), "branching"),
                                       (dict(branching=(1.5,)), "branching"),
                                       (dict(branching=(2,), width=0), "width"),
                                       (dict(width=0), "width"), (dict(width=2), "width"),
                                       (dict(score_temperature=0), "score_temperature"),
                                       (dict(branching=(2,), score_temperature=-1.0),
                                        "score_temperature")])
def test_bad_options_raise(random_gpt, kw, match):
    target = random_gpt(vocab_size=8, n_layer=1, n_head=2, n_embd=16, block_size=32, seed=1)
    with pytest.raises(ValueError, match=match):
        EagleDrafter(random_head(target), **kw)


@pytest.mark.parametrize("shape", ["default chain", "tree"])
def test_model_double_after_building_the_drafter(random_gpt, shape):
    """A float32 head and target, then target.double(): reset moves the head to the target's dtype,
    and greedy output equals float64 generate."""
    target = random_gpt(vocab_size=8, n_layer=2, n_head=2, n_embd=16, block_size=64, seed=3,
                        std=0.6)
    drafter = EagleDrafter(random_head(target), **SHAPES[shape])
    target.double()
    res = ms.speculative_generate(target, drafter, [2, 5, 7, 1], 20, gamma=4)
    assert res.tokens == ms.generate(target, [2, 5, 7, 1], 20).tokens
    assert sum(s.accepted for s in res.steps) > 0
    assert all(p.dtype == torch.float64 for p in drafter.head.parameters())


def test_training_lowers_the_loss_and_leaves_the_target_untouched(random_gpt, script):
    """scripts/train_eagle.py's eagle_loss trains the head and never the frozen target."""
    eagle_loss = script("train_eagle").eagle_loss
    target = random_gpt(vocab_size=16, n_layer=2, n_head=2, n_embd=16, block_size=32, seed=7,
                        std=0.5)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    head, g = EagleHead(target), torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-2)
    x = torch.randint(16, (8, 32), generator=g)
    with torch.no_grad():
        f = target.features(x)
    losses = []
    for _ in range(60):
        loss = eagle_loss(head, f, x, generator=g)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) < 0.7 * sum(losses[:5])
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())
    assert not any(p.requires_grad and p.grad is not None for p in target.parameters())


def test_save_load_round_trip(random_gpt, tmp_path):
    target = random_gpt(vocab_size=8, n_layer=1, n_head=2, n_embd=16, block_size=32, seed=1)
    head = random_head(target)
    state = {k: v.half() for k, v in head.state_dict().items()}
    torch.save(dict(state_dict=state, accuracy=[0.5, 0.4]), tmp_path / "h.pt")
    back = load_eagle(target, tmp_path / "h.pt")
    assert back.accuracy == [0.5, 0.4]
    f, x = torch.randn(1, 5, 16), torch.randint(8, (1, 5))
    assert torch.allclose(back(f, x), head.half().float()(f, x), atol=1e-5)


def test_bad_target_raises(random_gpt):
    target = random_gpt(vocab_size=8, n_layer=1, n_head=2, n_embd=16, block_size=32, seed=1)
    other = random_gpt(vocab_size=8, n_layer=1, n_head=2, n_embd=16, block_size=32, seed=2)
    with pytest.raises(ValueError, match="another model"):
        ms.speculative_generate(other, EagleDrafter(random_head(target)), [1, 2], 4)
