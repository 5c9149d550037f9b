"""Self-speculation (minispec.selfspec): early exit with a shared cache, Medusa heads, Jacobi/lookahead.

Every method must give exactly plain greedy decoding at temperature 0, and exactly the target's
distribution when sampling (exact enumeration of a tiny vocabulary + chi-square), while a lossy
rule (typical acceptance, accept-everything) is flagged by the same check.
"""
import itertools

import pytest
import torch

import minispec as ms
from minispec import selfspec
from minispec.selfspec import (EarlyExitDrafter, Lookahead, MedusaDrafter, MedusaHeads, head_accuracy, hidden_states,
                               load_medusa, medusa_loss, medusa_tree, save_medusa, self_speculative_generate)


def _heads(model, n_heads=3, seed=0, std=0.3, sequential=False):
    heads = MedusaHeads(model, n_heads, sequential)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0.0, std, generator=g)
    return heads


METHODS = {
    "early exit k=1 gamma=1": lambda m: EarlyExitDrafter(m, 1, 1),
    "early exit k=1 gamma=4": lambda m: EarlyExitDrafter(m, 1, 4),
    "early exit k=2 gamma=3": lambda m: EarlyExitDrafter(m, 2, 3),
    "early exit k=1 gamma=6 threshold=0.5": lambda m: EarlyExitDrafter(m, 1, 6, threshold=0.5),
    "medusa chain": lambda m: MedusaDrafter(m, _heads(m), [(0, 0, 0)]),
    "medusa tree": lambda m: MedusaDrafter(m, _heads(m), [(0,), (1,), (0, 1), (1, 0), (0, 0, 0), (2,)]),
    "hydra tree": lambda m: MedusaDrafter(m, _heads(m, sequential=True), [(0,), (1,), (0, 1), (1, 0), (0, 0, 0), (2,)]),
    "jacobi W=1": lambda m: Lookahead(m, 1, candidates=0),
    "jacobi W=5": lambda m: Lookahead(m, 5, candidates=0),
    "lookahead W=3 N=3 G=2": lambda m: Lookahead(m, 3, 3, 2),
    "lookahead W=2 N=4 G=4": lambda m: Lookahead(m, 2, 4, 4),
}


@pytest.mark.parametrize("name,vocab_size,seed", [(name, 8, 3) for name in METHODS] + [
    ("early exit k=2 gamma=3", 256, 1), ("medusa tree", 256, 1), ("hydra tree", 256, 1), ("lookahead W=3 N=3 G=2", 256, 1)])
def test_greedy_equals_plain_greedy(random_gpt, name, vocab_size, seed):
    m = random_gpt(vocab_size=vocab_size, n_layer=3, n_head=2, n_embd=32, block_size=64, seed=seed, std=0.3)
    method = METHODS[name](m)
    for ids, n in (([1, 2, 3], 40), ([5], 7), ([i % vocab_size for i in range(1, 30)], 34)):
        res = self_speculative_generate(method, ids, n)
        assert res.tokens == ms.generate(m, ids, n).tokens
        assert res.stats["target_calls"] == len(res.steps) <= n
    eos = ms.generate(m, [1, 2, 3], 40).tokens[9]
    res = self_speculative_generate(method, [1, 2, 3], 40, eos_token=eos)
    assert res.tokens == ms.generate(m, [1, 2, 3], 40, eos_token=eos).tokens


def test_early_exit_drafter_works_in_speculative_generate(random_gpt):
    m = random_gpt(vocab_size=16, n_layer=3, n_head=2, n_embd=32, seed=2, std=0.3)
    for k, gamma in ((1, 3), (2, 2)):
        res = ms.speculative_generate(m, EarlyExitDrafter(m, k), [1, 2], 30, gamma=gamma)
        assert res.tokens == ms.generate(m, [1, 2], 30).tokens


def test_early_exit_confidence_stop_shortens_rounds(random_gpt):
    """threshold 1: every draft is 'unsure', one per round; threshold 0: always the full gamma."""
    m = random_gpt(vocab_size=16, n_layer=3, n_head=2, n_embd=32, seed=2, std=0.3)
    res = [self_speculative_generate(EarlyExitDrafter(m, 1, 5, threshold=t), [1, 2], 30) for t in (1.0, 0.0)]
    for r, longest in zip(res, (1, 5)):
        done = 0
        for s in r.steps:  # near the end a round drafts only what still fits in max_new_tokens
            assert len(s.drafted) == min(longest, 30 - done - 1)
            done += s.accepted + 1
    assert res[0].tokens == res[1].tokens == ms.generate(m, [1, 2], 30).tokens


def test_early_exit_reuses_the_shared_cache(random_gpt):
    """Verification gives the logits of a fresh full forward pass, and in each round every new
    position passes through each block exactly once: blocks < k are not re-run on the drafts."""
    m = random_gpt(vocab_size=16, n_layer=4, n_head=2, n_embd=32, seed=4, std=0.3)
    fed = [0] * 4
    for i, block in enumerate(m.h):
        block.register_forward_hook(lambda mod, inp, out, i=i: fed.__setitem__(i, fed[i] + inp[0].shape[1]))
    d, g = EarlyExitDrafter(m, k=2), torch.Generator().manual_seed(0)
    context, start = [1, 2, 3, 4], 0
    for rnd in range(5):
        fed[:] = [0] * 4
        drafted, q = d.propose(context, 3, 1.0, None, None, g)
        seq = context + drafted
        logits = d.verify(seq)  # (len(seq) - start, V): every position not verified before
        assert fed == [len(seq) - start] * 4
        assert torch.allclose(logits, m(torch.tensor([seq]))[0, start:], atol=1e-5)
        start = len(context) + rnd % 4  # keep 0..3 drafts, as verification would
        d.rollback(start)
        context = seq[:start] + [int(torch.randint(16, (), generator=g))]


def test_tree_call_scores_every_node_like_its_path(random_gpt):
    m = random_gpt(vocab_size=16, n_layer=2, n_head=2, n_embd=32, seed=5)
    medusa = MedusaDrafter(m, _heads(m), [(0,), (1,), (0, 1), (1, 0), (0, 0, 0), (2,)])
    context = [3, 1, 4, 1, 5]
    medusa.reset()
    medusa.step(context[:2], 9, 0.0, None, None, None)  # leaves a hidden state; cache holds 2 tokens
    medusa.cache.crop(2)
    top = medusa.heads(medusa.h).topk(3, -1).indices.tolist()
    tree = selfspec._tree([[top[d][r] for d, r in enumerate(p)] for p in medusa.tree], 99)
    selfspec._tree_step(medusa, context, tree, 1.0, None, None, torch.Generator())
    for i in range(len(tree.tokens)):
        path = [tree.tokens[j] for j in tree.path(i)]
        ref = torch.softmax(m(torch.tensor([context + path]))[0, -1], -1)
        assert torch.allclose(medusa.p[i + 1], ref, atol=1e-5)


def _exact(model, prompt, n, temperature, top_k):
    """P(x_1..x_n | prompt) for every sequence, by enumeration: tensor (V,) * n."""
    V = model.config.vocab_size
    seqs = torch.tensor(list(itertools.product(range(V), repeat=n)))  # (V^n, n)
    x = torch.cat([torch.tensor(prompt).expand(len(seqs), -1), seqs], 1)
    with torch.no_grad():
        p = ms.probs(model(x)[:, len(prompt) - 1:-1], temperature, top_k)  # (V^n, n, V)
    return p.gather(-1, seqs[..., None])[..., 0].prod(-1).view((V,) * n)


def _counts(method, prompt, n, runs, temperature, top_k):
    V = method.model.config.vocab_size
    counts = torch.zeros((V,) * n)
    for seed in range(runs):
        counts[tuple(self_speculative_generate(method, prompt, n, temperature, top_k, seed=seed).tokens)] += 1
    return counts


LOSSLESS = {  # (method, temperature, top_k)
    "early exit": (lambda m: EarlyExitDrafter(m, 1, 2), 1.0, None),
    "early exit, confidence stop": (lambda m: EarlyExitDrafter(m, 1, 3, threshold=0.6), 1.0, None),
    "medusa tree": (lambda m: MedusaDrafter(m, _heads(m, 2, std=0.5), [(0,), (1,), (0, 0), (1, 1)]), 0.7, 2),
    "hydra tree": (lambda m: MedusaDrafter(m, _heads(m, 2, std=0.5, sequential=True), [(0,), (1,), (0, 0), (1, 1)]),
                   1.0, None),
    "lookahead": (lambda m: Lookahead(m, 2, 3, 2), 1.0, None),
}


def _tiny(random_gpt):
    return random_gpt(vocab_size=3, n_layer=2, n_head=1, n_embd=16, block_size=16, seed=7, std=0.8)


@pytest.mark.parametrize("name", LOSSLESS)
def test_sampling_is_lossless(random_gpt, chi2_pvalue, name):
    """3 new tokens over a 3-token vocabulary: 27 outcomes, their exact probabilities enumerated."""
    m, (make, temperature, top_k) = _tiny(random_gpt), LOSSLESS[name]
    counts = _counts(make(m), [1, 2], 3, 600, temperature, top_k)
    assert chi2_pvalue(counts, _exact(m, [1, 2], 3, temperature, top_k)) > 1e-3


def test_lossy_rules_are_flagged(random_gpt, chi2_pvalue, monkeypatch):
    """Negative controls: Medusa's typical acceptance, and an early exit that keeps every draft."""
    m = _tiny(random_gpt)
    exact = _exact(m, [1, 2], 3, 1.0, None)
    typical = MedusaDrafter(m, _heads(m, 2, std=0.5), [(0,), (1,), (0, 0), (1, 1)], typical=(0.3, 0.6))
    assert chi2_pvalue(_counts(typical, [1, 2], 3, 300, 1.0, None), exact) < 1e-4
    monkeypatch.setattr(selfspec, "speculative_accept", lambda x, q, p, g: (len(x), ms.sample(p[-1], g)))
    assert chi2_pvalue(_counts(EarlyExitDrafter(m, 1, 2), [1, 2], 3, 300, 1.0, None), exact) < 1e-4


def test_bad_settings_raise(random_gpt):
    m = random_gpt(vocab_size=8, n_layer=3, n_head=2, n_embd=16)
    for k in (0, 3, -1, 1.5):
        with pytest.raises(ValueError, match="exit layer k"):
            EarlyExitDrafter(m, k)
    with pytest.raises(ValueError, match="gamma"):
        EarlyExitDrafter(m, 1, gamma=0)
    for threshold in (-0.1, 1.5):
        with pytest.raises(ValueError, match="threshold"):
            EarlyExitDrafter(m, 1, threshold=threshold)
    with pytest.raises(ValueError, match="n_heads"):
        MedusaHeads(m, 0)
    with pytest.raises(ValueError, match="tree"):
        MedusaDrafter(m, _heads(m, 2), [(0, 0, 0)])
    with pytest.raises(ValueError, match="sequential heads need the drafted tokens"):
        _heads(m, 2, sequential=True)(torch.zeros(16))
    for kw, name in ((dict(window=0), "window"), (dict(ngram=1), "ngram"), (dict(candidates=-1), "candidates")):
        with pytest.raises(ValueError, match=name):
            Lookahead(m, **kw)
    with pytest.raises(ValueError, match="temperature"):
        self_speculative_generate(Lookahead(m), [1], 4, temperature=-1)
    with pytest.raises(ValueError, match="empty"):
        self_speculative_generate(EarlyExitDrafter(m, 1), [], 4)


def test_medusa_tree_known_answer():
    """Gains: (0,) .6, (1,) .2, (0,0) .6*.5 = .3, (0,1) .06: the best three are (0,), (0,0), (1,)."""
    assert medusa_tree([[0.6, 0.2], [0.5, 0.1]], 3) == [(0,), (0, 0), (1,)]
    assert medusa_tree([[0.6, 0.2], [0.5, 0.1]], 10) == [(0,), (0, 0), (1,), (1, 0), (0, 1), (1, 1)]


def test_medusa_heads_train_and_round_trip(random_gpt, tmp_path):
    m = random_gpt(vocab_size=16, n_layer=2, n_head=2, n_embd=32, seed=8, std=0.3)
    heads = MedusaHeads(m, 2)
    h = hidden_states(m, torch.tensor([[1, 2, 3]]))[0]  # zero-initialised heads repeat the target's guess
    assert torch.allclose(heads(h)[:, 0], m(torch.tensor([[1, 2, 3]]))[0], atol=1e-5)
    x = torch.randint(16, (2, 32), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.Adam(heads.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = medusa_loss(m, heads, x)
        opt.zero_grad(), loss.backward(), opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]
    assert all(p.grad is None for p in m.parameters())  # the target stays frozen
    heads.accuracy = [[0.5, 0.1], [0.3, 0.1]]
    save_medusa(heads, tmp_path / "h.pt")
    back = load_medusa(m, tmp_path / "h.pt")
    assert torch.allclose(back(h), heads(h), atol=1e-2) and back.accuracy == heads.accuracy


def test_hydra_heads_follow_the_drafted_path(random_gpt, tmp_path):
    """A sequential head's guess depends on the token before it: the tree's nodes at depth 2 differ
    by branch, and they are exactly what advance() gives for that branch. Training lowers the loss,
    the target stays frozen, and save/load keeps the heads sequential."""
    m = random_gpt(vocab_size=16, n_layer=2, n_head=2, n_embd=32, seed=8, std=0.3)
    heads = _heads(m, 2, std=0.5, sequential=True)
    drafter = MedusaDrafter(m, heads, [(0,), (1,), (0, 0), (1, 0)])
    drafter.reset()
    drafter.step([1, 2, 3], 9, 0.0, None, None, None)  # leaves the hidden state that predicted the next token
    paths = drafter._guesses(7, 9)
    z = heads.advance(drafter.h, 0, torch.tensor(7))
    assert [p[0] for p in paths[:2]] == heads.logits(z).topk(2).indices.tolist()
    for first, second in (paths[2], paths[3]):
        z1 = heads.advance(heads.advance(drafter.h, 0, torch.tensor(7)), 1, torch.tensor(first))
        assert second == int(heads.logits(z1).argmax())
    x = torch.randint(16, (2, 32), generator=torch.Generator().manual_seed(0))
    fresh = MedusaHeads(m, 2, sequential=True)
    opt, losses = torch.optim.Adam(fresh.parameters(), lr=1e-2), []
    for _ in range(15):
        loss = medusa_loss(m, fresh, x)
        opt.zero_grad(), loss.backward(), opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0] and all(p.grad is None for p in m.parameters())
    save_medusa(fresh, tmp_path / "h.pt")
    back = load_medusa(m, tmp_path / "h.pt")
    h = hidden_states(m, x[:1])
    assert back.sequential and all(torch.allclose(a, b, atol=1e-2) for a, b in zip(back.unroll(h, x[:1]), fresh.unroll(h, x[:1])))
    # accuracy from a list of sequences = from the same bytes read in windows
    flat = torch.cat([x.flatten(), torch.zeros(1, dtype=torch.long)])
    assert head_accuracy(m, fresh, [x[0], x[1]]) == head_accuracy(m, fresh, flat, block_size=32, max_windows=2)


@pytest.mark.skipif(not (ms.model.WEIGHTS_DIR / "medusa_heads.pt").exists(), reason="no shipped heads")
def test_shipped_models_greedy():
    from minispec.bench import bench_prompts
    target = ms.load_model("target")
    ids = bench_prompts(1, 64)[0]
    ref = ms.generate(target, ids, 24).tokens
    for method in (EarlyExitDrafter(target, 2), MedusaDrafter(target, load_medusa(target)), Lookahead(target)):
        assert self_speculative_generate(method, ids, 24).tokens == ref
