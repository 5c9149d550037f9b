"""Review fixes of stop 47: each test failed before its fix (or guards what must keep working)."""
import pytest
import torch

import minispec as ms


@pytest.mark.parametrize("seed", [2**70, 2**64, -2**63 - 1])
def test_a_seed_torch_cannot_take_is_a_value_error_naming_seed(byte_pair, seed):
    """2**70 was torch's "Overflow when unpacking long long", which does not say which argument;
    the range is torch's own, [-2**63, 2**64)."""
    target, draft = byte_pair
    with pytest.raises(ValueError, match="seed"):
        ms.generate(target, [1, 2, 3], 4, temperature=1.0, seed=seed)
    with pytest.raises(ValueError, match="seed"):
        ms.speculative_generate(target, draft, [[1, 2, 3], [4, 5]], 4, temperature=1.0, seed=seed)


def test_negative_and_large_seeds_in_range_still_sample(byte_pair):
    import numpy as np
    target, _ = byte_pair
    for seed in (-1, -2**63, 2**63, 2**64 - 1, np.int64(-2**63), np.uint64(2**63)):
        assert len(ms.generate(target, [1, 2, 3], 4, temperature=1.0, seed=seed).tokens) == 4


@pytest.mark.parametrize("name", ["eagle", "medusa", "hydra"])
def test_a_head_on_a_target_of_another_shape_is_a_value_error(name):
    """The heads were trained for the shipped target: on another GPT they were a RuntimeError from
    load_state_dict ("size mismatch for fc.weight")."""
    other = ms.GPT(ms.GPTConfig(n_layer=1, n_head=1, n_embd=8))
    with pytest.raises(ValueError, match="trained for a target of another shape"):
        ms.load_drafter(name, other)


@pytest.fixture(scope="module")
def tiny_llama():
    from minispec.bridge.llama import Llama, LlamaConfig
    torch.manual_seed(0)
    m = Llama(LlamaConfig(vocab_size=16, block_size=64, n_layer=2, n_head=2, n_kv_head=1,
                          n_embd=16, n_hidden=32)).eval()
    with torch.no_grad():  # sharper logits: greedy text that is not one token repeated
        for p in m.parameters():
            p.mul_(20)
    return m


def test_a_batch_on_a_llama_equals_each_prompt_alone(tiny_llama):
    """The ragged cache had GPT's n_head heads and feed called a Llama block with GPT's arguments
    (the cache in RoPE's cos): AttributeError. Rows of 8, 2 and 5 tokens: generate, and the
    loop with two drafters."""
    m, prompts = tiny_llama, [[1, 2, 3, 1, 2, 3, 1, 2], [5, 6], [7, 8, 9, 10, 11]]
    ref = [ms.generate(m, p, 12).tokens for p in prompts]
    assert len({tuple(r) for r in ref}) == 3 and any(len(set(r)) > 2 for r in ref)
    assert [r.tokens for r in ms.generate(m, prompts, 12)] == ref
    for drafter in (ms.load_drafter("lookup", m), ms.ModelDrafter(m)):
        out = ms.speculative_generate(m, drafter, prompts, 12, gamma=3)
        assert [r.tokens for r in out] == ref
    cache = ms.batch.RaggedCache(m.config, 3, 8)
    assert cache.k.shape == (2, 3, 1, 8, 8)  # one key/value head, as the model's own cache


def test_short_data_and_unknown_names_are_value_errors_that_say_so():
    """Each was a silent wrong answer or an error that named nothing: prompts(19) "subsection not
    found", bits_per_byte on 5 bytes [nan], alignment a torch.stack RuntimeError, divergence "KL"
    the TV, alpha_from_acceptance(0.5, 0) a ZeroDivisionError, get_batch random_'s RuntimeError."""
    from minispec.kit import data, theory, training
    target = ms.load_model("target")
    short = torch.tensor(list(b"hello"))
    cases = [(lambda: data.prompts(19), "18 prompts"),
             (lambda: data.prompts(1, offset=18), "18 prompts"),
             (lambda: data.bits_per_byte(target, short, block_size=8), "block_size=8"),
             (lambda: data.alignment(target, target, short, block_size=8), "too few"),
             (lambda: data.alignment(target, target, torch.arange(40) % 256, block_size=8,
                                     windows=6, spread=False), "too few"),
             (lambda: training.divergence(torch.zeros(3), torch.zeros(3), "KL"), "'kl' or 'tv'"),
             (lambda: theory.alpha_from_acceptance(0.5, 0), "gamma must be an integer >= 1"),
             (lambda: theory.alpha_from_acceptance(1.5, 4), "kept fraction"),
             (lambda: training.get_batch(torch.arange(9), 2, 8, torch.Generator()), "block_size")]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
    assert len(data.prompts(18)) == 18 and len(data.prompts(3, offset=15)) == 3
    assert training.get_batch(torch.arange(10), 2, 8, torch.Generator())[0].shape == (2, 8)


def test_the_trace_views_take_a_tokenizer_and_refuse_a_plain_decode():
    """ansi_trace and plot_trace had no decode (SmolLM2's ids: "bytes must be in range(0, 256)");
    plot_acceptance([]) was numpy's "zero-size array to reduction operation"."""
    import matplotlib
    matplotlib.use("Agg")
    from minispec.kit import viz
    target = ms.load_model("target")
    res = ms.speculative_generate(target, ms.load_drafter("draft", target), ms.encode("def "), 12)
    steps = [ms.rounds.Step(s.tree, s.path, s.token + 1000) for s in res.steps]  # ids past 255
    assert "<1" in viz.ansi_trace(steps, decode=lambda ids: f"<{ids[0]}>")
    assert viz.plot_trace(steps, decode=lambda ids: f"<{ids[0]}>") is not None
    with pytest.raises(ValueError, match="no rounds"):
        viz.plot_acceptance(ms.generate(target, ms.encode("def "), 4).steps)


def test_match_length_around_a_drafter_that_scores_and_counts_its_own_calls():
    """MatchLengthDrafter passed neither score nor calls on: around early exit the loop scored on
    a cache the inner drafter had moved ("p must have shape (5, V)"), and around a model draft it
    reported 0 draft calls."""
    from minispec.methods.match_length import MatchLengthDrafter
    target, draft = ms.load_model("target"), ms.load_model("draft")
    ids = ms.encode("def fib(n):\n    return fib(n-1)")
    ref = ms.generate(target, ids, 16).tokens
    inner = MatchLengthDrafter(ms.EarlyExitDrafter(target, k=2))
    assert ms.speculative_generate(target, inner, ids, 16, gamma=4).tokens == ref
    wrapped = ms.speculative_generate(target, MatchLengthDrafter(ms.ModelDrafter(draft)), ids, 16,
                                      gamma=4)
    assert wrapped.tokens == ref and wrapped.stats.draft_calls > 0


def test_fallback_of_two_vocabularies_and_bad_head_trees_are_value_errors():
    """A fallback whose `then` had another vocabulary was an IndexError mid-decode; head trees [()],
    [(-1,)], [(300,)], [(0.5,)] were max()'s, Index-, Runtime- and TypeErrors at the first draft."""
    target = ms.load_model("target")
    small = ms.GPT(ms.GPTConfig(vocab_size=100, n_layer=1, n_head=1, n_embd=8, block_size=256))
    with pytest.raises(ValueError, match="vocabulary"):
        ms.FallbackDrafter(ms.load_drafter("eagle", target), small)
    heads = ms.load_heads(target, "hydra")
    for tree in ([()], [(0,), ()], [(-1,)], [(300,)], [(0.5,)], [0, 1], []):
        with pytest.raises(ValueError, match="rank"):
            ms.HeadDrafter(heads, tree=tree)
    import numpy as np
    medusa = ms.HeadDrafter(ms.load_heads(target, "medusa"), tree=[np.array([0]), np.array([1])])
    assert medusa.tree == [(0,), (1,)]  # arrays as paths, as before the check
    ids = ms.encode("def fib(n):")
    hydra = ms.HeadDrafter(heads, tree=[[0], [1], [0, 0]])  # lists, as for medusa
    ref = ms.generate(target, ids, 12).tokens
    assert ms.speculative_generate(target, hydra, ids, 12).tokens == ref


@pytest.mark.parametrize("target", [None, "target"])
def test_load_drafter_names_a_target_that_is_not_a_model(target):
    """load_drafter("lookup", None) was an AttributeError on None.config."""
    for name in ("lookup", "early_exit"):
        with pytest.raises(ValueError, match="target must be a model"):
            ms.load_drafter(name, target)


def test_a_batched_draft_model_sizes_its_cache_as_the_target_does(tiny_llama):
    """Chains kept 2 x block_size entries a row whatever the call needed: 16,384 for a drafter of
    SmolLM2's config (about 750 MB a row); now the loop's room for its prompts and new tokens."""
    from minispec.batch.loop import batched
    chains = batched(ms.ModelDrafter(tiny_llama), 3, size=40)
    assert chains.cache.size == 40 and chains.cache.k.shape[2] == 1  # n_kv_head
    fallback = batched(ms.FallbackDrafter(ms.PromptLookupDrafter(), ms.ModelDrafter(tiny_llama)), 2,
                       size=24)
    assert fallback.then.cache.size == 24


def test_exact_law_reads_every_comparison_of_a_coin():
    """`torch.rand(()) <= a` (or >=, >) was a TypeError inside exact_law, so a right answer to an
    exercise written that way failed its check; each is the branch point `< a` is."""
    from minispec.kit.checks import exact_law
    for flip in (lambda: torch.rand(()) < 0.3, lambda: torch.rand(()) <= 0.3,
                 lambda: not torch.rand(()) >= 0.3, lambda: not torch.rand(()) > 0.3):
        law = exact_law(flip)
        assert law[True] == pytest.approx(0.3) and law[False] == pytest.approx(0.7)


def test_spread_of_no_ratios_says_so():
    """spread([]) was statistics' StatisticsError ("no median for empty data")."""
    from minispec.kit.timing import spread
    with pytest.raises(ValueError, match="no ratios"):
        spread([])
    assert spread([1.0, 2.0, 1.5]) == "1.50x (1.00-2.00)"


def test_an_empty_batch_gives_no_results():
    """A batch of no prompts returned [] before the caches were sized to the prompts ("max() arg
    is an empty sequence" after)."""
    from minispec.batch.loop import generate_batch, speculative_generate_batch
    target = ms.load_model("target")
    assert generate_batch(target, [], 4) == []
    assert speculative_generate_batch(target, ms.load_drafter("lookup", target), [], 4) == []
