"""What the review of issue 27 found in the loops, the drafters and the kit (items 4, 5, 6, 8, 13):
each test failed on main 4273b84 (or on main with the bug of item 13 planted) and passes now.
The CUDA tests run where a GPU is present."""
import copy
import math

import pytest
import scipy.stats
import torch
import torch.nn.functional as F

import minispec as ms
from minispec.kit import checks, data, timing, viz
from minispec.methods import EagleDrafter

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
SHIPPED = ["draft", "draft_distilled", "draft_onpolicy", "lookup", "early_exit", "medusa", "hydra",
           "eagle", "layer_skip", "beam", "learned_stop", "streaming"]


@pytest.fixture(scope="module")
def target64(shipped):
    return copy.deepcopy(shipped).double()


def modules(drafter):
    """The networks a drafter holds (its own model, heads, EAGLE head; the target for some)."""
    return [v for v in vars(drafter).values() if isinstance(v, torch.nn.Module)]


# --- item 4: a shipped drafter follows its target's dtype and device ------------------------------

@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_drafter_follows_a_float64_target(target64, name):
    """load_drafter("draft", target.double()).model was float32: a float64 target verified float32
    q's (the heads and EAGLE already followed)."""
    drafter = ms.load_drafter(name, target64)
    params = [p for m in modules(drafter) for p in m.parameters()]
    assert name == "lookup" or params
    assert all(p.dtype == torch.float64 for p in params), name


@CUDA
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_drafter_follows_a_target_on_the_gpu(shipped, name):
    gpu = copy.deepcopy(shipped).to("cuda")
    drafter = ms.load_drafter(name, gpu)
    assert all(p.device.type == "cuda" for m in modules(drafter) for p in m.parameters()), name


@CUDA
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_drafter_decodes_on_the_gpu(target64, name):
    """Every shipped drafter, its target on the GPU, float64 on both sides (the GPU's rounding
    cannot swap a near-tie): greedy equals the CPU's greedy, and sampling runs (the learned stop
    built its features on the CPU while its head sat on the GPU until stop 49)."""
    gpu, prompt = copy.deepcopy(target64).to("cuda"), ms.encode("def fib(n):")
    ref = ms.generate(target64, prompt, 24).tokens
    res = ms.speculative_generate(gpu, ms.load_drafter(name, gpu), prompt, 24, gamma=4)
    assert res.tokens == ref, name
    res = ms.speculative_generate(gpu, ms.load_drafter(name, gpu), prompt, 8, gamma=4,
                                  temperature=1.0)
    assert len(res.tokens) == 8, name


# --- item 5: bad input gets a ValueError that names it --------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(ids=[100, 1.9]), "token id must be an integer"),
    (dict(ids=torch.tensor([100.0, 1.9])), "token id must be an integer"),
    (dict(ids=["def", "import"]), "not text"),
    (dict(temperature="1"), "temperature"),
    (dict(top_p="0.5"), "top_p"),
    (dict(seed=None), "seed"),
    (dict(seed=1.5), "seed"),
])
def test_bad_input_is_a_clear_value_error(byte_pair, kwargs, match):
    """[100, 1.9] was silently [100, 1]; a batch of strings said "invalid literal for int()";
    temperature="1" was a TypeError, seed=None torch's RuntimeError."""
    target, draft = byte_pair
    call = {"ids": [1, 2, 3], "max_new_tokens": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        ms.speculative_generate(target, draft, **call)
    with pytest.raises(ValueError, match=match):
        ms.generate(target, **call)


def test_whole_float_ids_and_numpy_seeds_still_work(byte_pair):
    import numpy as np
    target, draft = byte_pair
    ref = ms.generate(target, [1, 2, 3], 4).tokens
    assert ms.generate(target, [1.0, 2, 3], 4).tokens == ref
    assert ms.speculative_generate(target, draft, torch.tensor([1.0, 2, 3]), 4).tokens == ref
    assert ms.generate(target, [1, 2, 3], 4, temperature=1.0, seed=np.int64(3)).tokens == \
        ms.generate(target, [1, 2, 3], 4, temperature=1.0, seed=3).tokens


def test_fallback_then_gamma_zero_is_refused(byte_pair):
    """then_gamma=0 was silently the same as None (no cap)."""
    _, draft = byte_pair
    for bad in (0, -1, 2.5, "4"):
        with pytest.raises(ValueError, match="then_gamma"):
            ms.FallbackDrafter(ms.PromptLookupDrafter(), draft, then_gamma=bad)
    assert ms.FallbackDrafter(ms.PromptLookupDrafter(), draft, then_gamma=2.0).then_gamma == 2


@pytest.mark.parametrize("name, method", [("medusa_heads", "medusa"), ("hydra_heads", "hydra"),
                                          ("eagle_head", "eagle")])
def test_load_model_on_a_head_file_says_how_to_load_it(name, method):
    """load_model("medusa_heads") was KeyError: 'config'."""
    with pytest.raises(ValueError, match=r"not a GPT.*load_drafter\(its name, target\)") as raised:
        ms.load_model(name)
    assert repr(method) in str(raised.value)


# --- item 6: the kit's helpers follow the model ---------------------------------------------------

def test_bits_per_byte_sums_in_the_models_dtype(random_gpt):
    """A float64 model's bits per byte, summed in float32 before, now equal the plain float64
    forwards' mean cross-entropy to 1e-12."""
    m = random_gpt(vocab_size=256, n_layer=2, n_embd=16, block_size=32, seed=1).double()
    text = data.heldout()[1000:1065]
    bpb = data.bits_per_byte(m, text, block_size=32, max_windows=2)
    with torch.no_grad():
        ce = [F.cross_entropy(m(text[s:s + 32][None])[0], text[s + 1:s + 33]) for s in (0, 32)]
    assert bpb[-1] == pytest.approx(float(sum(ce)) / 2 / math.log(2), rel=1e-12)


def test_alignment_and_pq_explorer_run_on_a_float64_pair(shipped, target64):
    draft = ms.load_model("draft")
    want = data.alignment(shipped, draft, windows=2, block_size=64)
    got = data.alignment(target64, draft.double(), windows=2, block_size=64)
    assert got == pytest.approx(want, abs=1e-5)
    w = viz.pq_explorer(target64, draft, "def f(x):")
    w.children[0].value = 0.5


@CUDA
def test_the_kit_follows_a_model_on_the_gpu(shipped):
    gpu, draft = copy.deepcopy(shipped).to("cuda"), ms.load_model("draft").to("cuda")
    text = data.heldout()[:2000]
    assert data.bits_per_byte(gpu, text, 64, 4) == pytest.approx(
        data.bits_per_byte(shipped, text, 64, 4), abs=1e-4)
    assert data.alignment(gpu, draft, windows=2, block_size=64) == pytest.approx(
        data.alignment(shipped, draft.cpu(), windows=2, block_size=64), abs=1e-4)
    w = viz.pq_explorer(gpu, draft.to("cuda"), "def f(x):")
    w.children[0].value = 0.5


# --- item 8: a model drafter's cache follows any context ------------------------------------------

@pytest.mark.parametrize("branching", [None, (2, 2)])
def test_a_model_drafter_drafts_for_an_unrelated_context_as_a_fresh_one(random_gpt, branching):
    """ModelDrafter.draft cropped its cache to len(context) - 1, assuming each context extends the
    last: after drafting for a, b was drafted from a's keys. Now it keeps the common prefix."""
    model = random_gpt(vocab_size=256, n_layer=1, seed=3)
    a, b = list(range(40, 52)), [7, 8, 9, 10]
    for second in (b, a[:5] + b):  # unrelated, then a shared prefix (whose entries are kept)
        d = ms.ModelDrafter(model, branching=branching)
        d.draft(a, 4)
        tree = d.draft(second, 4)
        fresh = ms.ModelDrafter(model, branching=branching).draft(second, 4)
        assert tree.tokens == fresh.tokens and tree.parents == fresh.parents
        for i in tree.q:
            torch.testing.assert_close(tree.q[i], fresh.q[i])


# --- item 13: the planted bugs --------------------------------------------------------------------

def test_each_shipped_draft_loads_its_own_weights(shipped):
    """load_drafter("draft_onpolicy") loading the plain draft's weights passed every test."""
    states = {}
    for name in ("draft", "draft_distilled", "draft_onpolicy"):
        got = ms.load_drafter(name, shipped).model.state_dict()
        ckpt = torch.load(ms.model.WEIGHTS_DIR / f"{name}.pt", weights_only=True)["state_dict"]
        assert all(torch.equal(got[k], v.float()) for k, v in ckpt.items()), name
        states[name] = got["h.0.attn.c_attn.weight"]
    assert not torch.equal(states["draft"], states["draft_distilled"])
    assert not torch.equal(states["draft"], states["draft_onpolicy"])
    assert not torch.equal(states["draft_distilled"], states["draft_onpolicy"])


def test_a_batch_row_stops_working_at_its_eos(shipped):
    """A row that emitted EOS kept drafting and being verified (finish() hid it in the tokens): each
    row's work (target calls, drafted tokens, every round) equals that prompt decoded alone."""
    target, draft = copy.deepcopy(shipped).double(), ms.load_model("draft").double()
    prompts = ms.data.prompts(4, length=48)
    seen = [ms.generate(target, p, 24).tokens[:12] for p in prompts]
    eos = next(t for t in range(256) if sum(t in s for s in seen) == 2)  # early, in two rows
    outs = ms.speculative_generate(target, draft, prompts, 24, gamma=4, eos_token=eos)
    ended = 0
    for p, out in zip(prompts, outs):
        alone = ms.speculative_generate(target, draft, p, 24, gamma=4, eos_token=eos)
        ended += len(alone.tokens) < 24
        assert out.tokens == alone.tokens
        assert [(s.tree.tokens, s.path, s.token) for s in out.steps] == \
            [(s.tree.tokens, s.path, s.token) for s in alone.steps]
        assert (out.stats.target_calls, out.stats.drafted) == \
            (alone.stats.target_calls, alone.stats.drafted)
    assert 0 < ended < len(prompts)


def test_chi2_pools_small_cells_and_sees_extra_mass_on_them():
    """Dropping the cells expecting under 5 counts (instead of pooling them) is blind to extra mass
    on rare outcomes: 13 counts where 3 are expected. (The pool of the two expects 3, under 5, so
    it takes the rarest other cell too: 20 counts where 10 are expected; stop 49.)"""
    probs, counts = [0.9, 0.07, 0.02, 0.01], [80, 7, 8, 5]
    want = scipy.stats.chisquare([80, 20], [90, 10]).pvalue
    assert want < 1e-3
    assert checks.chi2_pvalue(counts, probs) == pytest.approx(want, rel=1e-9)


def fake_clock(monkeypatch, durations):
    """timing's clock advanced by each run of the function returned, by the next duration."""
    clock, durations = [0.0], iter(durations)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])

    def run():
        clock[0] += next(durations)
    return run


def test_paired_keeps_each_sides_best_not_its_last(monkeypatch):
    """paired timing the method's last run (here 4.0) against the baseline's best passed."""
    run = fake_clock(monkeypatch, [5.0, 1.0, 2.0, 7.0, 9.0, 4.0])  # base, method, base, ...
    assert timing.paired(run, run)[2:] == (2.0, 1.0)
    run = fake_clock(monkeypatch, [2.0, 3.0, 5.0, 6.0, 9.0, 4.0])
    assert timing.paired(run, run)[2:] == (2.0, 3.0)


@pytest.mark.parametrize("durations, band", [
    ([1.0, 1.5, 1.1, 1.0], 0.5),  # pairs 1/1.5 and 1.1/1: the widest is below 1
    ([1.0, 1.1, 1.5, 1.0], 0.5),  # pairs 1/1.1 and 1.5/1: the widest is above 1
])
def test_noise_band_is_two_sided(monkeypatch, durations, band):
    """A one-sided band (the largest ratio - 1, or 1 - ratio) passed. Stop 54: which side of the
    widest pair ran first no longer matters (it read 1/3 for 1/1.5, where 1.5/1 reads 0.5: a ratio
    of 1.4 was then called "faster" though the same work had landed 1.5x apart)."""
    run = fake_clock(monkeypatch, durations)
    assert timing.noise_band(run, repeats=1, pairs=2) == pytest.approx(band)


def test_verdict_needs_the_whole_band():
    """"faster" once a ratio cleared half the band passed."""
    assert timing.verdict(1.07, 0.1) == timing.verdict(0.93, 0.1) == "the same (within noise)"
    assert timing.verdict(1.11, 0.1) == "faster" and timing.verdict(0.89, 0.1) == "slower"


class CheckedEagle(EagleDrafter):
    """After each accept: the true features it keeps for the head, against a plain forward."""

    def accept(self, context, tree, path, hidden, logits):
        super().accept(context, tree, path, hidden, logits)
        seq = context + [tree.tokens[i] for i in path]
        with torch.no_grad():
            true = self.model.features(torch.tensor([seq]))[0, len(seq) - len(self.pending):]
        self.errors.append(float((self.pending - true).abs().max()))
        self.paths.append(path)


def test_eagle_keeps_the_features_of_the_kept_path(target64):
    """EagleDrafter.accept keeping the features of the first len(path) nodes in tree order (right
    for a chain, wrong for a tree) passed: lossless, fewer tokens per call."""
    head = ms.load_drafter("eagle", target64).head
    drafter = CheckedEagle(head, branching=(3, 2, 2), width=3)
    drafter.errors, drafter.paths = [], []
    ms.speculative_generate(target64, drafter, ms.encode("    def __init__(self, x):\n"), 40,
                            gamma=8)
    assert any(len(p) > 1 and p != list(range(len(p))) for p in drafter.paths)
    assert max(drafter.errors) < 1e-9
