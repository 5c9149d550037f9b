"""Search-based drafts (survey section 3.1.2): draft beam search as a tree of guesses
(minispec.methods.beam), and the lossy top-k shortcut (minispec.methods.top_k) as the negative
control its losslessness checks must catch.

Beam search is checked against an enumeration of every continuation (wide enough, it is exact);
the loop with it gives exactly plain greedy decoding at temperature 0 and exactly the target's law
when sampling (exact on a float64 model with vocabulary 8, chi-square on the shipped pair), while
keeping a guess whenever it is in the target's top k is caught by both checks.
"""
import copy
import functools
import itertools

import pytest
import torch

import minispec as ms
from minispec.bridge.llama import Llama, LlamaConfig
from minispec.methods import BeamDrafter, topk_accept


def pair(random_gpt, vocab_size, seed):
    """A float64 target (2 layers, a weak second block) and a float64 draft made of its first
    layer (as conftest's byte_pair): they agree often but not always."""
    kw = dict(vocab_size=vocab_size, n_head=2, n_embd=32, block_size=64)
    target = random_gpt(n_layer=2, seed=seed, std=0.3, **kw)
    with torch.no_grad():
        for name, p in target.named_parameters():
            if name.startswith("h.1.") and "c_proj" in name:
                p.mul_(0.3)
    draft = ms.GPT(ms.GPTConfig(n_layer=1, **kw))
    first = {k: v for k, v in target.state_dict().items() if not k.startswith("h.1.")}
    draft.load_state_dict(first)
    return target.double(), draft.eval().double()


def test_beam_search_finds_the_best_sequences(random_gpt):
    """Vocabulary 3, depth 3, width 9 = 3^2: no beam is ever pruned before the last step, so the
    beams are exactly the 9 most probable of the 27 continuations under the draft, best first
    (each sequence's log-probability from plain forward passes, enumerated). width=1: the draft's
    greedy chain (ModelDrafter's, at temperature 0)."""
    draft = random_gpt(vocab_size=3, n_layer=1, n_head=1, n_embd=16, block_size=16, seed=4,
                       std=0.8).double()
    context = [0, 2, 1]
    seqs = list(itertools.product(range(3), repeat=3))
    x = torch.tensor([context + list(s) for s in seqs])
    with torch.no_grad():
        lp = torch.log_softmax(draft(x)[:, len(context) - 1:-1], -1)  # (27, 3, 3)
    scores = lp.gather(-1, x[:, len(context):, None])[..., 0].sum(-1)  # (27,)
    best = [list(seqs[i]) for i in scores.argsort(descending=True)[:9]]
    d = BeamDrafter(draft, width=9, depth=3)
    d.reset()  # an empty cache: search feeds the whole context
    assert d.search(context, 3) == best
    assert d.calls == 3  # one draft call per depth
    tree = d.draft(context, 100)  # the prefix tree of the 9 beams
    assert all(q is None for q in tree.q.values())  # guesses: no q
    paths = {tuple(tree.tokens[j] for j in path_of(tree, i)) for i in range(len(tree.tokens))}
    assert paths == {tuple(b[:k]) for b in best for k in (1, 2, 3)}
    chain = ms.ModelDrafter(draft).draft(context, 3)
    assert BeamDrafter(draft, width=1, depth=3).draft(context, 3).tokens == chain.tokens


def path_of(tree, i):
    return path_of(tree, tree.parents[i]) + [i] if i >= 0 else []


def test_the_budget_goes_to_the_best_beams(random_gpt):
    """gamma trims the tree: the best beam whole, then the next ones while nodes are left."""
    draft = random_gpt(vocab_size=8, n_layer=1, n_embd=32, seed=2, std=0.5).double()
    d = BeamDrafter(draft, width=4, depth=3)
    d.reset()
    beams = d.search([1, 2, 3], 3)
    for gamma in (1, 2, 3, 5, 7):
        tree = d.draft([1, 2, 3], gamma)
        assert tree.tokens == ms.Tree.from_paths(beams, gamma).tokens
        assert len(tree.tokens) == min(gamma, len(ms.Tree.from_paths(beams).tokens))
        assert tree.tokens[:min(gamma, 3)] == beams[0][:gamma]  # the best beam first
    assert d.draft([1, 2, 3], 8, depth=2).depths().max() == 2  # the loop's depth cap


@pytest.mark.parametrize("vocab_size, seed, width, depth, gamma",
                         [(8, 3, 3, 3, 6), (8, 5, 1, 4, 4), (256, 1, 4, 4, 8), (256, 2, 8, 2, 5)])
def test_greedy_equals_generate_on_random_float64_models(random_gpt, vocab_size, seed, width,
                                                         depth, gamma):
    target, draft = pair(random_gpt, vocab_size, seed)
    drafter, kept = BeamDrafter(draft, width, depth), 0
    for ids, n in (([1, 2, 3], 40), ([5], 7), ([i % vocab_size for i in range(1, 30)], 34)):
        res = ms.speculative_generate(target, drafter, ids, n, gamma=gamma)
        assert res.tokens == ms.generate(target, ids, n).tokens
        assert all(len(s.tree.tokens) <= gamma for s in res.steps)
        kept += sum(s.accepted for s in res.steps)
    assert kept  # (guesses were kept: the drafter is not idle)


def unseen_prompts(n=3, length=96):
    """Held-out prompts no notebook or benchmark uses: at an eighth, three eighths, ... into the
    held-out files (kit.data.prompts start at quarters)."""
    files = ms.data.heldout_files()
    starts = [files[i].index(b"\n", len(files[i]) * (2 * i + 1) // 8) + 1 for i in range(n)]
    return [list(files[i][s:s + length]) for i, s in enumerate(starts)]


def test_greedy_equals_generate_on_the_shipped_pair(shipped):
    kept = 0
    for width, depth, gamma in ((4, 4, 8), (2, 6, 10)):
        drafter = ms.load_drafter("beam", shipped, width=width, depth=depth)
        for ids in unseen_prompts():
            res = ms.speculative_generate(shipped, drafter, ids, 40, gamma=gamma)
            assert res.tokens == ms.generate(shipped, ids, 40).tokens
            kept += sum(s.accepted for s in res.steps)
    assert kept


@pytest.fixture(scope="module")
def tiny8(random_gpt):
    return pair(random_gpt, 8, 6)


def sampled_law(exact_law, dense, target, drafter, rule=None, n=3, **kw):
    """The loop's exact law of n new tokens (vocabulary 8), every draw enumerated."""
    extra = {} if rule is None else {"rule": rule}

    def run():
        return tuple(ms.speculative_generate(target, drafter, [1, 2], n, gamma=4, **kw,
                                             **extra).tokens)
    return dense(exact_law(run), 8, n)


@pytest.mark.parametrize("kw", [dict(temperature=1.0), dict(temperature=0.7, top_k=3)])
def test_sampling_exact_law(tiny8, exact_law, dense, target_law, kw):
    """Vocabulary 8, 3 new tokens, float64: the beams are guesses, and the output law is the
    target's, exactly; the guesses were kept in some outcomes (else the check would be idle)."""
    target, draft = tiny8
    drafter = BeamDrafter(draft, width=3, depth=3)
    law = sampled_law(exact_law, dense, target, drafter, **kw)
    assert float((law - target_law(target, [1, 2], 3, **kw)).abs().max()) < 1e-12
    res = [ms.speculative_generate(target, drafter, [1, 2], 3, gamma=4, seed=s, **kw)
           for s in range(20)]
    assert any(st.accepted for r in res for st in r.steps)


def test_the_top_k_rule_is_caught_exactly(tiny8, exact_law, dense, target_law):
    """The same loop with topk_accept (k = 2, 4): its law differs from the target's beyond 1e-6
    (lossless: below 1e-12, above)."""
    target, draft = tiny8
    drafter = BeamDrafter(draft, width=3, depth=3)
    want = target_law(target, [1, 2], 3)
    for k in (2, 4):
        rule = functools.partial(topk_accept, k=k)
        law = sampled_law(exact_law, dense, target, drafter, rule, temperature=1.0)
        assert abs(float(law.sum()) - 1) < 1e-12
        assert float((law - want).abs().max()) > 1e-6
        assert 0.5 * float((law - want).abs().sum()) > 0.01  # total variation, not a residue


PROMPT = ms.encode("self.a = self.")  # spread next-byte laws (as in test_shipped.py)


@pytest.fixture(scope="module")
def two_token_law(shipped):
    """P(x1, x2 | PROMPT) at temperature 1, from the shipped target alone: (256, 256), float64."""
    with torch.no_grad():
        lp1 = torch.log_softmax(shipped(torch.tensor([PROMPT]))[0, -1].double(), -1)  # (V,)
        after = shipped(torch.tensor([PROMPT + [x] for x in range(256)]))[:, -1]
        lp2 = torch.log_softmax(after.double(), -1)  # (V, V)
    return (lp1[:, None] + lp2).exp()


def two_token_counts(target, drafter, n, **kw):
    counts = torch.zeros(256, 256)
    for seed in range(n):
        x1, x2, _ = ms.speculative_generate(target, drafter, PROMPT, 3, gamma=4, temperature=1.0,
                                            seed=seed, **kw).tokens
        counts[x1, x2] += 1
    return counts


def test_chi_square_on_the_shipped_pair(shipped, two_token_law, chi2_pvalue):
    """The beam drafter passes; the top-k rule (k = 3) on the same drafter is caught."""
    drafter = ms.load_drafter("beam", shipped, width=3, depth=2)
    counts = two_token_counts(shipped, drafter, 400)
    assert chi2_pvalue(counts, two_token_law) > 1e-3
    rule = functools.partial(topk_accept, k=3)
    counts = two_token_counts(shipped, drafter, 200, rule=rule)
    assert chi2_pvalue(counts, two_token_law) < 1e-6


def test_top_k_rule_known_answers():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    g = torch.Generator().manual_seed(0)
    assert topk_accept([1], None, p, g, k=2) == 1      # in the top 2: kept, whatever q says
    assert topk_accept([2, 1], None, p, g, k=2) == 1   # the first candidate in the top k
    assert topk_accept([3], None, p, g, k=4) != 3      # p(x) = 0: never emitted
    draws = [topk_accept([2], None, p, torch.Generator().manual_seed(s), k=2) for s in range(200)]
    assert set(draws) <= {0, 1, 2} and 2 in draws and 0 in draws  # not kept: a draw from p


@pytest.mark.parametrize("kw, match", [(dict(width=0), "width"), (dict(width=1.5), "width"),
                                       (dict(depth=0), "depth"), (dict(depth=-1), "depth"),
                                       (dict(width=None), "width")])
def test_bad_options_raise(random_gpt, kw, match):
    with pytest.raises(ValueError, match=match):
        BeamDrafter(random_gpt(vocab_size=8, n_layer=1), **kw)


def test_registry_options_and_refusals(shipped):
    d = ms.load_drafter("beam", shipped, width=2, depth=5)
    assert isinstance(d, BeamDrafter) and (d.width, d.depth) == (2, 5)
    draft = ms.load_model("draft").state_dict()
    assert all(torch.equal(v, draft[k]) for k, v in d.model.state_dict().items())
    with pytest.raises(ValueError, match="takes no option 'gamma'"):
        ms.load_drafter("beam", shipped, gamma=4)
    with pytest.raises(ValueError, match="width"):
        ms.load_drafter("beam", shipped, width=0)
    llama = Llama(LlamaConfig(vocab_size=8, block_size=16, n_layer=1, n_head=2, n_kv_head=1,
                              n_embd=8, n_hidden=16))
    with pytest.raises(ValueError, match="trained for minispec's byte-level GPT"):
        ms.load_drafter("beam", llama)
    with pytest.raises(ValueError, match="target must be a model"):
        ms.load_drafter("beam", torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="one prompt at a time"):
        ms.speculative_generate(shipped, d, [[1, 2], [3]], 4)
    with pytest.raises(ValueError, match="k must be"):
        topk_accept([0], None, torch.tensor([1.0]), k=0)


def test_beams_follow_a_float64_target(shipped):
    target64 = copy.deepcopy(shipped).double()
    d = ms.load_drafter("beam", target64)
    assert all(p.dtype == torch.float64 for p in d.model.parameters())
    res = ms.speculative_generate(target64, d, PROMPT, 16, gamma=6)
    assert res.tokens == ms.generate(target64, PROMPT, 16).tokens
