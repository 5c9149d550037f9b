"""Review fixes of stop 49 (a bug hunt of the kit and the batched loop): each test failed before
its fix."""
import pytest
import torch

import minispec as ms
from minispec.kit import checks, timing


class TwoBranches(ms.PromptLookupDrafter):
    """A subclass whose own draft is a tree: the target's greedy chain and a spoiled copy."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        g = gamma if depth is None else min(gamma, depth)
        right = ms.generate(self.target, context, g).tokens if g else []
        wrong = [(t + 1) % 256 for t in right]
        return ms.Tree.from_paths([wrong[:g // 2], right[:g - g // 2]], g) if g else ms.Tree()


class LongerMatch(ms.PromptLookupDrafter):
    """A subclass that changes only what it matches: still a chain, so it still batches."""

    def match(self, context, gamma):
        return super().match(context, gamma)[:max(gamma - 1, 1)]


def test_a_batch_refuses_a_lookup_subclass_that_drafts_its_own_way(byte_pair):
    """The batched loop feeds a row's drafts as a chain; a PromptLookupDrafter subclass with its
    own draft (here a two-branch tree) decoded both rows wrongly, silently, at temperature 0."""
    target, _ = byte_pair
    prompts = [ms.encode("def fib(n):\n    return fib("), ms.encode("x = [1, 2, 3]\ny = [")]
    drafter = TwoBranches(target)
    for p in prompts:  # one prompt at a time, the tree is fine
        assert ms.speculative_generate(target, drafter, p, 12, gamma=6).tokens == \
            ms.generate(target, p, 12).tokens
    with pytest.raises(ValueError, match="drafts one prompt at a time"):
        ms.speculative_generate(target, drafter, prompts, 12, gamma=6)
    rows = ms.speculative_generate(target, LongerMatch(), prompts, 12, gamma=4)
    assert [r.tokens for r in rows] == [ms.generate(target, p, 12).tokens for p in prompts]


def test_chi2_pools_a_lone_rare_cell_with_the_next_rarest():
    """One cell expecting 0.05 counts was 'pooled' alone, and a sampler drawing from the very law
    tested failed at p < 0.001 about 5% of the time; pooled with the next rarest cell, at about
    the nominal rate."""
    assert checks.chi2_pvalue([500, 499, 1], [0.49995, 0.49995, 0.0001]) > 0.5
    law = torch.tensor([0.49995, 0.49995, 0.0001], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    pvalues = torch.tensor([checks.chi2_pvalue(torch.multinomial(law, 1000, True, generator=g)
                                               .bincount(minlength=3), law)
                            for _ in range(1000)])
    assert (pvalues < 0.01).double().mean() < 0.02  # 0.01 nominal; 0.05 before the fix
    lossy = torch.tensor([0.56, 0.44, 0.0], dtype=torch.float64)  # the test still has power
    counts = torch.multinomial(lossy, 5000, True, generator=g).bincount(minlength=3)
    assert checks.chi2_pvalue(counts, law) < 1e-3


@pytest.mark.parametrize("draw", ["tensor multinomial", "randint", "bernoulli", "gumbel"])
def test_exact_law_refuses_draws_it_cannot_enumerate(draw):
    """These drew from the real generator inside exact_law, and it returned a wrong law (one
    outcome with probability 1) without a word."""
    q = torch.tensor([0.5, 0.5])
    fns = {"tensor multinomial": lambda: int(q.multinomial(1)),
           "randint": lambda: int(torch.randint(0, 2, ())),
           "bernoulli": lambda: int(torch.bernoulli(torch.tensor(0.5))),
           "gumbel": lambda: int((q.log() - torch.empty(2).exponential_().log()).argmax())}
    with pytest.raises(NotImplementedError, match="exact_law"):
        checks.exact_law(fns[draw])
    assert len({int(q.multinomial(1)) for _ in range(64)}) == 2  # restored afterwards
    assert checks.exact_law(lambda: ms.sample(q)) == {0: 0.5, 1: 0.5}


def test_race_takes_a_gpt_drafter_as_the_loop_does(byte_pair):
    """metered wrapped drafter.draft, which a GPT does not have (AttributeError)."""
    target, draft = byte_pair
    cmp, line, parts = timing.race(target, draft, [(0, ms.encode("def f"))], 4, 2, band=0.5,
                                   repeats=1)
    assert len(cmp.ratios) == 1 and cmp.ratios[0] > 0


@pytest.mark.parametrize("repeats", [1.5, None, "3", 0])
def test_paired_names_a_bad_repeats(repeats):
    with pytest.raises(ValueError, match="repeats"):
        timing.paired(lambda: 1, lambda: 2, repeats)


def test_learned_stop_features_stay_on_the_logits_device():
    """stop_features moved them to the CPU while the head sits on the model's device: on a GPU
    the first drafted token raised a device mismatch. A meta tensor shows the device kept."""
    from minispec.methods.learned_stop import stop_features
    assert stop_features(torch.zeros(256, device="meta"), 7).device.type == "meta"
    want = torch.tensor([0.25, float(torch.log(torch.tensor(4.0))), 0.25])
    assert torch.allclose(stop_features(torch.zeros(4), 1), want)


def test_hydra_counts_one_head_call_per_depth():
    """Hydra's heads run one batched call per depth of the tree; draft_calls counted one a round."""
    target = ms.load_model("target")
    res = ms.speculative_generate(target, ms.load_drafter("hydra", target), ms.encode("def f("),
                                  24, gamma=6)
    depths = [int(s.tree.depths().max()) if s.tree.tokens else 0 for s in res.steps]
    assert res.stats.draft_calls == sum(depths) > len([d for d in depths if d])


@pytest.mark.parametrize("make, match", [
    (lambda t: ms.load_drafter(["lookup"], t), "unknown drafter"),
    (lambda t: ms.HeadDrafter(t), "heads must be MedusaHeads"),
    (lambda t: ms.methods.eagle.EagleDrafter(t), "head must be a GPT's EAGLE head"),
    (lambda t: ms.bridge.llama.LlamaConfig(n_head=0), "n_head"),
    (lambda t: ms.bridge.llama.LlamaConfig(n_kv_head=2), "n_kv_head")])
def test_methods_name_bad_arguments(byte_pair, make, match):
    """Each raised a TypeError, AttributeError or ZeroDivisionError from inside."""
    target, _ = byte_pair
    with pytest.raises(ValueError, match=match):
        make(target)


def test_from_hf_takes_an_explicit_n_inner_of_four_widths(optional):
    """GPT-2's n_inner=None means 4 * n_embd; the same width given explicitly was refused."""
    transformers = optional("transformers")
    from minispec.bridge.hf import from_hf
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, n_positions=16, vocab_size=50,
                                     n_inner=128)
    hf = transformers.GPT2LMHeadModel(config).eval()
    x = torch.randint(0, 50, (1, 8))
    with torch.no_grad():
        assert (from_hf(hf)(x) - hf(x).logits).abs().max() < 1e-4
    with pytest.raises(ValueError, match="n_inner"):
        from_hf(transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_embd=32, n_layer=1, n_head=2, n_positions=16, vocab_size=50, n_inner=96)))


@pytest.mark.parametrize("kind", ["early_exit", "layer_skip"])
@pytest.mark.parametrize("threshold", ["0.5", True])
def test_a_threshold_that_is_not_a_number_is_named(kind, threshold):
    """A string threshold raised a TypeError from `0 <= threshold`."""
    target = ms.load_model("target")
    with pytest.raises(ValueError, match="threshold must be a number"):
        ms.load_drafter(kind, target, threshold=threshold)


def test_a_loader_given_another_methods_file_names_it():
    """load_heads on EAGLE's file raised KeyError 'n_heads'; load_eagle on Medusa's a RuntimeError
    listing missing keys; load_stop_head on Medusa's KeyError 'features'."""
    from minispec.methods.eagle import load_eagle
    from minispec.methods.learned_stop import load_stop_head
    from minispec.model import WEIGHTS_DIR
    target = ms.load_model("target")
    with pytest.raises(ValueError, match="holds no Medusa or Hydra heads"):
        ms.load_heads(target, str(WEIGHTS_DIR / "eagle_head.pt"))
    with pytest.raises(ValueError, match="another method's file"):
        load_eagle(target, WEIGHTS_DIR / "medusa_heads.pt")
    with pytest.raises(ValueError, match="was fitted on features"):
        load_stop_head(WEIGHTS_DIR / "medusa_heads.pt")


@pytest.mark.parametrize("call, match", [
    (lambda t: checks.target_law(t, [], 1), "at least one token id"),
    (lambda t: checks.target_law(t, [1, 999], 1), "token id in"),
    (lambda t: checks.target_law(t, [1], 0), "m \\(the tokens enumerated\\)"),
    (lambda t: checks.repeated_share([1, 2], [3], n=0), "n \\(the n-gram length\\)")])
def test_checks_name_bad_arguments(byte_pair, call, match):
    """target_law raised a RuntimeError (a float index tensor) or an IndexError; repeated_share
    with n=0 returned 1.0."""
    target, _ = byte_pair
    with pytest.raises(ValueError, match=match):
        call(target)


@pytest.mark.parametrize("layers", [1, (0.5, 1)])
def test_eagle_llama_head_names_bad_layer_indices(layers):
    """layers=1 raised TypeError (no len), (0.5, 1) a TypeError later, at the first forward."""
    from minispec.bridge.llama import Llama, LlamaConfig
    from minispec.methods.eagle_llama import EagleLlamaHead
    config = LlamaConfig(vocab_size=64, block_size=32, n_layer=3, n_head=2, n_kv_head=1, n_embd=16,
                         n_hidden=32)
    with pytest.raises(ValueError, match="layers must be two blocks"):
        EagleLlamaHead(Llama(config), keep=torch.arange(8), layers=layers)
