"""Token trees: one-pass tree scoring, greedy exactness, lossless multi-draft verification.

Exact enumeration of SpecInfer's multi-round rule, chi-square checks of the code (one node and a
whole two-level tree), and lossy rules (one target sample per branch; Medusa's typical
acceptance; no residual update) that the same checks flag.
"""
import itertools

import pytest
import torch

import minispec as ms
from minispec.drafters import ModelDrafter, PromptLookupDrafter
from minispec.tree import (Tree, fit_score_temperature, greedy_draft_logits, grow_tree, keep_path,
                           per_branch_accept, score_tree, tree_generate, tree_mask, typical_accept, verify_tree)


def _random_tree(n, vocab, g):
    tree = Tree()
    while len(tree.tokens) < n:
        parent = int(torch.randint(-1, len(tree.tokens), (1,), generator=g))
        tree.add(parent, int(torch.randint(vocab, (1,), generator=g)))
    return tree


def test_tree_mask_known_answer():
    # context of 3 tokens, the last 2 not cached yet; nodes: 0 and 1 under the root, 2 under 0
    m = tree_mask([-1, -1, 0], n_ctx=3, n_prefix=2).int()
    assert m.tolist() == [[1, 1, 0, 0, 0, 0],   # context token 2 sees tokens 1-2
                          [1, 1, 1, 0, 0, 0],   # context token 3 sees tokens 1-3
                          [1, 1, 1, 1, 0, 0],   # node 0: context + itself
                          [1, 1, 1, 0, 1, 0],   # node 1: context + itself (not its sibling)
                          [1, 1, 1, 1, 0, 1]]   # node 2: context + node 0 + itself


@pytest.mark.parametrize("seed", range(4))
def test_one_pass_equals_each_path(random_gpt, seed):
    """Tree mask + positions: the logits at every node equal scoring its root-to-node path alone."""
    model = random_gpt(vocab_size=11, n_layer=2, seed=seed)
    g = torch.Generator().manual_seed(seed)
    tree, ctx = _random_tree(12, 11, g), torch.randint(11, (7,), generator=g).tolist()
    cache = model.new_cache()
    model(torch.tensor([ctx[:3]]), cache)  # part of the context is cached already
    logits = score_tree(model, cache, ctx, tree)  # (N + 1, V)
    with torch.no_grad():
        assert torch.allclose(logits[0], model(torch.tensor([ctx]))[0, -1], atol=1e-5)
        for i in range(len(tree.tokens)):
            path = ctx + [tree.tokens[j] for j in tree.path(i)]
            assert torch.allclose(logits[i + 1], model(torch.tensor([path]))[0, -1], atol=1e-5)
        # afterwards the cache keeps only a chosen path, exactly as if it had been fed alone
        path = tree.path(len(tree.tokens) - 1)
        keep_path(cache, len(ctx), path)
        fresh = model.new_cache()
        model(torch.tensor([ctx + [tree.tokens[j] for j in path]]), fresh)
        n = fresh.length
        assert cache.length == n and torch.allclose(cache.k[:, :, :, :n], fresh.k[:, :, :, :n], atol=1e-5)


SHAPES = [dict(branching=(2, 2, 1)), dict(branching=(1, 1, 1, 1)), dict(branching=(3, 3, 3, 3), width=2, budget=8),
          dict(branching=(4,) * 12, width=3, budget=20, score_temperature=0.5),
          dict(branching=(2, 2), lookup=PromptLookupDrafter(2, vocab_size=8))]


@pytest.mark.parametrize("shape", SHAPES)
def test_greedy_tree_equals_greedy(random_gpt, shape):
    target, draft = random_gpt(vocab_size=8, n_layer=2, seed=1), random_gpt(vocab_size=8, n_layer=1, seed=2)
    g = torch.Generator().manual_seed(0)
    for _ in range(6):
        ids = torch.randint(8, (int(torch.randint(1, 10, (1,), generator=g)),), generator=g).tolist()
        res = tree_generate(target, draft, ids, 25, **shape)
        assert res.tokens == ms.generate(target, ids, 25).tokens
        assert res.stats["target_calls"] == len(res.steps) <= 25


def test_greedy_tree_other_drafters_and_edges(random_gpt):
    target, draft = random_gpt(vocab_size=8, n_layer=2, seed=1), random_gpt(vocab_size=8, n_layer=1, block_size=64, seed=2)
    ids = [1, 2, 3, 1, 2]
    ref = ms.generate(target, ids, 40).tokens
    for d in (PromptLookupDrafter(3, vocab_size=8), ModelDrafter(draft)):
        assert tree_generate(target, d, ids, 40, branching=(2,) * 5).tokens == ref
    long = list(range(8)) * 7  # 56 tokens: the tree must shrink to fit block_size = 64
    assert tree_generate(target, draft, long, 8, branching=(4, 4)).tokens == ms.generate(target, long, 8).tokens
    assert tree_generate(target, draft, [3], 1).tokens == ms.generate(target, [3], 1).tokens
    for bad in (dict(branching=()), dict(branching=(2, 0)), dict(temperature=1.0, lookup=PromptLookupDrafter())):
        with pytest.raises(ValueError):
            tree_generate(target, draft, ids, 4, **bad)


@pytest.mark.parametrize("seed", range(3))
def test_budget_stops_growing_without_changing_the_tree(random_gpt, seed):
    """Growth stops once no deeper node can enter the `budget` most probable ones: the tree must be
    exactly the top-`budget` nodes of the tree grown to full depth."""
    draft = random_gpt(vocab_size=8, n_layer=1, seed=seed)
    ctx, kw = [1, 2, 3], dict(branching=(3,) * 10, width=3, score_temperature=0.7)
    full = grow_tree(ModelDrafter(draft), ctx, **kw)
    drafter = ModelDrafter(draft)
    small = grow_tree(drafter, ctx, budget=9, **kw)
    top = full.select(sorted(range(len(full.tokens)), key=lambda i: (-full.scores[i], i))[:9])
    assert (small.tokens, small.parents) == (top.tokens, top.parents) and len(small.tokens) == 9
    assert drafter.calls < 10  # it stopped early
    assert max(small.depths()) < max(full.depths()) == 10  # full: grown to all 10 depths


def test_tree_deeper_than_block_room_and_errors(random_gpt):
    """The draft's cache holds 2 x block_size entries, so a tree may have more nodes than free
    positions; positions past block_size and a full cache are clear errors."""
    target, draft = random_gpt(vocab_size=8, n_layer=2, seed=1), random_gpt(vocab_size=8, n_layer=1, seed=2)
    ids = list(range(8)) * 6  # 48 of block_size 64
    res = tree_generate(target, draft, ids, 15, branching=(4,) * 14, width=4, budget=12)
    assert res.tokens == ms.generate(target, ids, 15).tokens
    assert len(grow_tree(ModelDrafter(draft), ids, (4,) * 14, width=4).tokens) > 64 - len(ids)
    cache = draft.new_cache(size=10)
    with pytest.raises(ValueError, match="KV cache holds 10"):
        draft(torch.tensor([ids[:11]]), cache)
    with pytest.raises(ValueError, match="block_size"):
        draft(torch.tensor([ids[:5]]), draft.new_cache(size=200), pos=torch.arange(62, 67))
    for bad in (dict(score_temperature=0), dict(width=0), dict(budget=0)):
        with pytest.raises(ValueError, match="score_temperature"):
            tree_generate(target, draft, ids, 4, **bad)


def test_fit_score_temperature(random_gpt):
    """Temperature scaling recovers a known temperature: tokens drawn from softmax(2 z) are best
    explained by logits z at t = 0.5. Along greedy runs, a draft that IS the target always has the
    token on top, so the sharpest t wins; an unrelated draft is mostly wrong and is best flattened."""
    z = torch.randn(20_000, 6, generator=torch.Generator().manual_seed(0))
    drawn = torch.multinomial(torch.softmax(2 * z, -1), 1, generator=torch.Generator().manual_seed(1))[:, 0]
    assert fit_score_temperature(z, drawn) == 0.5
    assert fit_score_temperature(2 * z, drawn) == 1
    target, other = random_gpt(vocab_size=16, n_layer=2, seed=1), random_gpt(vocab_size=16, n_layer=1, seed=5)
    prompts, grid = [[1, 2, 3], [4, 5]], (0.5, 1, 2, 4)
    logits, tokens = greedy_draft_logits(target, target, prompts, 20)
    assert logits.shape == (40, 16) and tokens.tolist() == sum((ms.generate(target, p, 20).tokens for p in prompts), [])
    assert fit_score_temperature(logits, tokens, grid) == 0.5
    assert fit_score_temperature(*greedy_draft_logits(target, other, prompts, 20), grid) > 1


def _mda_exact(cands, q, p, update=True):
    """Exact output distribution of the multi-round rule for fixed candidates (no randomness).
    update=False (lossy): every candidate is tried against the original p; only the final
    fallback uses the residual."""
    out, left, cur = torch.zeros_like(p), 1.0, p
    for x in cands:
        a = min(1.0, float(cur[x] / q[x])) if q[x] > 0 else 1.0
        out[x] += left * a
        left *= 1 - a
        cur = ms.residual(cur, q) if update else p
    return out + left * (cur if update else ms.residual(p, q))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_multi_draft_exact_enumeration(k):
    """Averaging over every candidate list (k iid draws from q) gives p exactly; without the
    residual update (the negative control) it does not."""
    cases = [(torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.2, 0.6])),
             (torch.tensor([0.0, 0.7, 0.3]), torch.tensor([0.6, 0.4, 0.0])),
             (torch.tensor([0.1, 0.1, 0.8]), torch.tensor([0.1, 0.1, 0.8]))]
    for p, q in cases:
        for update in (True, False):
            total = torch.zeros(3)
            for cands in itertools.product(range(3), repeat=k):
                weight = float(torch.prod(q[list(cands)]))
                if weight > 0:
                    total += weight * _mda_exact(cands, q, p, update)
            if update or (k == 1 or torch.equal(p, q)):  # k = 1 or p == q: the update does not matter
                assert torch.allclose(total, p, atol=1e-6)
            else:
                assert not torch.allclose(total, p, atol=1e-3)


def _node_counts(rule, p, q, k, n, seed=0):
    g, counts = torch.Generator().manual_seed(seed), torch.zeros(len(p))
    for _ in range(n):
        counts[rule(torch.multinomial(q, k, replacement=True, generator=g).tolist(), q, p, g)] += 1
    return counts


def test_multi_draft_chi_square_and_lossy_controls(chi2_pvalue):
    p, q = torch.tensor([0.4, 0.3, 0.2, 0.1]), torch.tensor([0.1, 0.2, 0.3, 0.4])
    assert chi2_pvalue(_node_counts(ms.multi_draft_accept, p, q, 3, 2000), p) > 1e-3
    assert chi2_pvalue(_node_counts(per_branch_accept, p, q, 3, 2000), p) < 1e-3
    assert chi2_pvalue(_node_counts(typical_accept, p, q, 3, 2000), p) < 1e-3


def _two_level_counts(rule, p0, p1, q0, q1, ks, n, seed=0):
    """Draw a two-level tree (ks[0] root draws from q0, ks[1] draws from q1[x] under each child x),
    verify it against p0 / p1 and return counts of the first two emitted tokens."""
    g, V = torch.Generator().manual_seed(seed), len(p0)
    counts = torch.zeros(V, V)
    for _ in range(n):
        tree = Tree()
        tree.cands[-1], tree.q[-1] = torch.multinomial(q0, ks[0], True, generator=g).tolist(), q0
        for x in tree.cands[-1]:
            node = tree.add(-1, x)
            if node not in tree.cands:
                tree.cands[node], tree.q[node] = torch.multinomial(q1[x], ks[1], True, generator=g).tolist(), q1[x]
                for y in tree.cands[node]:
                    tree.add(node, y)
        # target rows: p0 at the root, p1[x] after a depth-1 node x, anything after depth 2 (a third token)
        p = torch.stack([p0] + [p1[t] if par < 0 else torch.full((V,), 1.0 / V) for t, par in zip(tree.tokens, tree.parents)])
        path, tok = verify_tree(tree, p, 1.0, rule, g)
        out = [tree.tokens[i] for i in path] + [tok]
        if len(out) == 1:  # the next round would draw the second token from p1
            out.append(ms.sample(p1[out[0]], g))
        counts[out[0], out[1]] += 1
    return counts


def test_tree_verification_lossless_and_lossy_controls(chi2_pvalue):
    """Two levels of iid candidates, verified node by node: the first two tokens follow p0 * p1 exactly."""
    p0 = torch.tensor([0.5, 0.3, 0.2])
    p1 = torch.tensor([[0.6, 0.2, 0.2], [0.1, 0.1, 0.8], [0.3, 0.4, 0.3]])  # p(x2 | x1)
    q0 = torch.tensor([0.2, 0.3, 0.5])
    q1 = torch.tensor([[0.2, 0.5, 0.3], [0.4, 0.3, 0.3], [0.3, 0.3, 0.4]])
    exact = p0[:, None] * p1
    assert chi2_pvalue(_two_level_counts(ms.multi_draft_accept, p0, p1, q0, q1, (2, 2), 2000), exact) > 1e-3
    assert chi2_pvalue(_two_level_counts(per_branch_accept, p0, p1, q0, q1, (2, 2), 2000), exact) < 1e-3
    assert chi2_pvalue(_two_level_counts(typical_accept, p0, p1, q0, q1, (2, 2), 2000), exact) < 1e-3


@pytest.mark.parametrize("shape", [dict(branching=(3, 2)), dict(branching=(3, 2), width=1, score_temperature=0.5)])
def test_tree_generate_sampling_lossless(random_gpt, chi2_pvalue, shape):
    """End to end with tiny models: two tokens from tree_generate at temperature 1 follow the target,
    for a static tree and a dynamic one (only the best-scored depth-1 node gets children)."""
    V = 3
    target = random_gpt(vocab_size=V, n_layer=1, n_embd=16, seed=5, std=0.1)
    draft = random_gpt(vocab_size=V, n_layer=1, n_embd=16, seed=15, std=0.1)
    prompt = [0, 1, 2, 0, 1]
    with torch.no_grad():
        p0 = ms.probs(target(torch.tensor([prompt]))[0, -1])
        p1 = torch.stack([ms.probs(target(torch.tensor([prompt + [x]]))[0, -1]) for x in range(V)])
    counts = torch.zeros(V, V)
    for seed in range(600):
        x1, x2, _ = tree_generate(target, draft, prompt, 3, temperature=1.0, seed=seed, **shape).tokens
        counts[x1, x2] += 1
    assert chi2_pvalue(counts, p0[:, None] * p1) > 1e-3
