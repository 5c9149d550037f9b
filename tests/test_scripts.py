"""The tooling that made the shipped weights (scripts/), smoke-tested at tiny sizes so that every
weight file stays reproducible by the command the model card documents; the training pieces
(minispec.kit.training, which scripts/training.py re-exports: every exit's logits, the early-exit
and Medusa losses, the heads unrolled); and the benchmarks' helpers (score calibration, the
speedup predicted with prefill, paired timing).

Training reads the local standard library (scripts/train.py: corpus_files); here the corpus is the
shipped held-out text instead (fast, and the same on every machine). Nothing is written outside
tmp_path.
"""
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import minispec as ms
from minispec.kit.data import DATA_DIR, HELD_OUT, heldout
from minispec.methods import HeadDrafter, load_heads
from minispec.model import WEIGHTS_DIR


@pytest.fixture
def train(script, monkeypatch):
    """scripts/train.py, reading the shipped held-out files as its corpus (train and held-out
    alike)."""
    mod = script("train")
    files = [DATA_DIR / f"{name}.txt" for name in HELD_OUT]
    monkeypatch.setattr(mod, "corpus_files", lambda: (files, files))
    return mod


TINY = dict(n_layer=2, n_head=2, n_embd=16, steps=3, batch_size=2, lr=1e-3, early_exit=True,
            block_size=32)


@pytest.mark.parametrize("early_exit", [True, False], ids=["target", "draft"])
def test_train_a_tiny_model_reproducibly(train, tmp_path, capsys, early_exit):
    """The target's recipe (early-exit loss) and the draft's (final exit only, one layer)."""
    tiny = dict(TINY, early_exit=early_exit, n_layer=2 if early_exit else 1)
    model, bpb = train.train("tiny", out=tmp_path / "a.pt", **tiny)
    n = tiny["n_layer"]
    assert len(bpb) == n and all(0 < b < 9 for b in bpb)  # bits per byte of each exit (8: uniform)
    loaded = ms.load_model(str(tmp_path / "a.pt"))
    card = torch.load(tmp_path / "a.pt", weights_only=True)["card"]
    assert card["steps"] == 3 and card["early_exit"] == early_exit
    assert card["held_out_bits_per_byte"] == bpb
    assert loaded.config.n_layer == n and "saved" in capsys.readouterr().out
    train.train("tiny", out=tmp_path / "b.pt", **tiny)  # the same seed: the same weights, exactly
    again = torch.load(tmp_path / "b.pt", weights_only=True)["state_dict"]
    first = torch.load(tmp_path / "a.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_distill_runs(train, tmp_path):
    model, before, after = train.distill(steps=2, batch_size=2, block_size=32,
                                         out=tmp_path / "d.pt")
    assert all(0 <= x <= 1 for x in before + after)
    card = torch.load(tmp_path / "d.pt", weights_only=True)["card"]
    assert card["distilled_from"] == "target" and card["steps"] == 2
    assert vars(ms.load_model(str(tmp_path / "d.pt")).config) == vars(ms.load_model("draft").config)


@pytest.mark.parametrize("sequential", [False, True], ids=["medusa", "hydra"])
def test_train_heads_save_load(script, shipped, tmp_path, sequential):
    """A few steps of head training on the shipped target, saved and loaded back (fp16): the heads,
    their accuracy (which shapes the default tree) and a working drafter; the same seed gives the
    same heads."""
    th = script("train_heads")
    text = heldout()
    tiny = dict(n_heads=2, steps=2, batch_size=2, block_size=32, data=text, held=text[:2049],
                sequential=sequential, log_every=0)
    heads = th.train_heads(shipped, **tiny)
    assert len(heads.accuracy) == 2
    assert all(len(a) == 4 and all(0 <= x <= 1 for x in a) for a in heads.accuracy)
    th.save_heads(heads, tmp_path / "h.pt", command="test")
    back = load_heads(shipped, str(tmp_path / "h.pt"))
    assert back.sequential == sequential and back.accuracy == heads.accuracy
    for (k, a), (_, b) in zip(heads.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a.half().float(), b), k
    ids = ms.encode("def fib(n):")
    res = ms.speculative_generate(shipped, HeadDrafter(back), ids, 16, gamma=4)
    assert res.tokens == ms.generate(shipped, ids, 16).tokens
    same = th.train_heads(shipped, **tiny)
    pairs = zip(heads.state_dict().values(), same.state_dict().values())
    assert all(torch.equal(a, b) for a, b in pairs)


def test_head_accuracy_reads_windows_or_sequences(script, random_gpt):
    """The accuracy from a list of sequences equals that from the same bytes read in windows."""
    head_accuracy = script("train_heads").head_accuracy
    m = random_gpt(vocab_size=16, n_layer=2, n_head=2, n_embd=32, seed=8, std=0.3)
    heads = ms.MedusaHeads(m, 2, sequential=True)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0, 0.3, generator=torch.Generator().manual_seed(0))
    x = torch.randint(16, (2, 32), generator=torch.Generator().manual_seed(0))
    flat = torch.cat([x.flatten(), torch.zeros(1, dtype=torch.long)])
    windows = head_accuracy(m, heads, flat, block_size=32, max_windows=2)
    assert head_accuracy(m, heads, [x[0], x[1]]) == windows


def test_the_model_card_documents_a_command_for_every_weight_file():
    """Each shipped weight file is reproduced by a documented `python scripts/...` command whose
    script exists."""
    card = (WEIGHTS_DIR / "README.md").read_text()
    commands = re.findall(r"python (scripts/\w+\.py)([^`\n]*)", card)
    assert commands and all((WEIGHTS_DIR.parents[1] / path).exists() for path, _ in commands)
    assert "python -m minispec.train" not in card and "minispec.selfspec train" not in card
    documented = {"target.pt": "--model target", "draft.pt": "--model draft",
                  "draft_distilled.pt": "--distill", "medusa_heads.pt": "train_heads.py --steps",
                  "draft_onpolicy.pt": "distill_onpolicy.py --divergence tv",
                  "hydra_heads.pt": "--sequential", "learned_stop.pt": "train_learned_stop.py",
                  "eagle_smollm2.pt": "train_eagle_smollm2.py"}
    lines = card.splitlines()
    for f in sorted(p.name for p in WEIGHTS_DIR.glob("*.pt")):
        assert f in documented or f == "eagle_head.pt", f"{f}: add it to this test and the card"
        flag = documented.get(f, "train_eagle.py")
        assert any(flag in line and "python scripts/" in line for line in lines), f


def test_fit_score_temperature(script, random_gpt):
    """Temperature scaling (benchmarks/drafters_trees.py) recovers a known temperature: tokens drawn
    from softmax(2 z) are best explained by logits z at t = 0.5. Along greedy runs, a draft that IS
    the target always has the token on top, so the sharpest t wins; an unrelated draft is mostly
    wrong and is best flattened."""
    bench = script("drafters_trees")
    z = torch.randn(20_000, 6, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    drawn = torch.multinomial(torch.softmax(2 * z, -1), 1, generator=g)[:, 0]
    assert bench.fit_score_temperature(z, drawn) == 0.5
    assert bench.fit_score_temperature(2 * z, drawn) == 1
    target = random_gpt(vocab_size=16, n_layer=2, seed=1)
    other = random_gpt(vocab_size=16, n_layer=1, seed=5)
    prompts, grid = [[1, 2, 3], [4, 5]], (0.5, 1, 2, 4)
    logits, tokens = bench.greedy_draft_logits(target, target, prompts, 20)
    greedy = sum((ms.generate(target, p, 20).tokens for p in prompts), [])
    assert logits.shape == (40, 16) and tokens.tolist() == greedy
    assert bench.fit_score_temperature(logits, tokens, grid) == 0.5
    unrelated = bench.greedy_draft_logits(target, other, prompts, 20)
    assert bench.fit_score_temperature(*unrelated, grid) > 1


def test_predicted_speedup_with_prefill_known_answer(script):
    """Same setting, 100 new tokens after a prompt whose prefill costs 10 target steps (draft: 1):
        autoregressive: 10 + 100 = 110 target steps
        speculative:    10 + 1 + 100 * 1.4 / 3.3616 = 52.647...
        speedup         = 110 / 52.647 = 2.0894...
    No prefill gives the steady-state formula (theory.speedup); an endless prompt gives no speedup
    at all."""
    predicted_speedup = script("bench").predicted_speedup
    want = 110 / (11 + 100 * 1.4 / 3.3616)
    got = predicted_speedup(0.8, 4, 0.1, 1.0, 100, prefill=10, draft_prefill=1)
    assert got == pytest.approx(want)
    assert predicted_speedup(0.8, 4, 0.1, 1.0, 100) == pytest.approx(ms.speedup(0.8, 4, 0.1))
    assert predicted_speedup(0.8, 4, 0.1, 1.0, 100, prefill=1e9) == pytest.approx(1.0, abs=1e-6)


def test_batching_benchmark_smoke(script, capsys, tmp_path):
    """benchmarks/batching.py runs end to end on a tiny setting, every row equals autoregressive
    decoding, and its plot is written."""
    png = tmp_path / "batching.png"
    script("batching").main(["--prompts", "3", "--max-new-tokens", "4", "--batches", "1", "2",
                             "--gammas", "2", "--repeats", "1", "--temperatures", "0",
                             "--plot", str(png)])
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith(("| 1 |", "| 2 |"))]
    assert len(rows) == 2 and all(line.rstrip().endswith("| 0 |") for line in rows)  # != AR: none
    assert png.stat().st_size > 1000


def test_eagle3_experiment_smoke(script, capsys):
    """scripts/eagle3_experiment.py trains both heads a few steps and prints one accuracy row for
    each."""
    script("eagle3_experiment").main(["--steps", "2", "--batch-size", "2", "--block-size", "16",
                                      "--windows", "1"])
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith(("| EAGLE", "| fused"))]
    assert len(rows) == 2 and all(len(line.split("/")) == 5 for line in rows)  # depths 1-5


def test_paired_timing_alternates_and_keeps_each_sides_best(script, monkeypatch):
    """benchmarks/common.paired, which is minispec.kit.timing.paired (every benchmark's, notebook's
    and the demo's speedup): the two sides take turns, each side's time is its fastest run (a slow
    spell on a shared machine only adds time), and the results come back with the times."""
    from minispec.kit import timing
    common, clock, order = script("common"), [0.0], []
    assert common.paired is timing.paired
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])

    def side(name, durations):
        def run():
            order.append(name)
            clock[0] += durations.pop(0)  # this run takes that long on the fake clock
            return name
        return run
    base, method, t_base, t_method = common.paired(side("ar", [5.0, 2.0, 9.0]),
                                                   side("spec", [4.0, 7.0, 1.0]))
    assert order == ["ar", "spec"] * 3 and (base, method) == ("ar", "spec")
    assert (t_base, t_method) == (2.0, 1.0)
    assert common.spread([1.0, 2.0, 4.0]) == "2.00x (1.00-4.00)"
    with pytest.raises(ValueError, match="repeats"):
        common.paired(side("ar", []), side("spec", []), repeats=0)
    assert timing.verdict(1.2, 0.1) == "faster" and timing.verdict(0.85, 0.1) == "slower"
    assert timing.verdict(1.05, 0.1) == timing.verdict(0.95, 0.1) == "the same (within noise)"


def test_noise_band_and_compare_on_a_fake_clock(monkeypatch):
    """noise_band times one function against itself (the largest |ratio - 1| over its pairs);
    compare gives per-item ratios, their median and a verdict against the band."""
    from minispec.kit import timing
    clock, costs = [0.0], iter([1.0, 1.1, 1.0, 1.0, 1.2, 1.0] + [2.0, 1.0] * 2 + [3.0, 1.0] * 2)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])

    def run():
        clock[0] += next(costs)
        return clock[0]
    band = timing.noise_band(run, repeats=1, pairs=3)  # pairs: 1.0/1.1, 1.0/1.0, 1.2/1.0
    assert band == pytest.approx(0.2)
    cmp = timing.compare(lambda item: run(), lambda item: run(), ["a", "b"], repeats=2, band=band)
    assert cmp.ratios == [2.0, 3.0] and cmp.median == 2.5 and cmp.verdict == "faster"
    assert "2.50x (2.00-3.00): faster" in str(cmp)
    with pytest.raises(ValueError, match="at least one item"):
        timing.compare(run, run, [])


def test_exit_logits_are_the_truncated_models_and_the_last_is_the_forward(script, random_gpt):
    """exit_logits (what train.py's early-exit loss reads): exit l is the model cut after block l,
    through the shared ln_f and head, i.e. a GPT of l layers with the same weights; the last exit is
    the full forward, and lm_head(hidden_states) is the forward too."""
    training = script("training")
    m = random_gpt(vocab_size=16, n_layer=3, n_embd=16, seed=2)
    x = torch.randint(16, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        exits = training.exit_logits(m, x)
        assert len(exits) == 3 and all(e.shape == (2, 10, 16) for e in exits)
        torch.testing.assert_close(exits[-1], m(x))
        torch.testing.assert_close(m.lm_head(training.hidden_states(m, x)), m(x))
        for n in (1, 2):
            cut = ms.GPT(ms.GPTConfig(vocab_size=16, n_layer=n, n_head=2, n_embd=16, block_size=64))
            keep = {k: v for k, v in m.state_dict().items()
                    if not k.startswith("h.") or int(k.split(".")[1]) < n}
            cut.load_state_dict(keep)
            torch.testing.assert_close(exits[n - 1], cut.eval()(x))
        assert not torch.allclose(exits[0], exits[1])


def test_early_exit_loss_known_answer(training):
    """N = 3 exits over V = 4 tokens, each putting logit a_l on the right token and 0 elsewhere:
    CE_l = ln(e^a + 3) - a. LayerSkip's weights l / N favour the deeper exits:
        loss = CE_3 + (1/3 CE_1 + 2/3 CE_2) / 2;
    with one exit, the plain cross-entropy; with two, CE_2 + CE_1 / 2."""
    early_exit_loss = training.early_exit_loss
    y = torch.tensor([[0, 3, 1]])

    def exit_with(a):  # logits (1, 3, 4): a on the target, 0 elsewhere
        return a * F.one_hot(y, 4).float()
    ce = [math.log(math.exp(a) + 3) - a for a in (0.0, 1.0, 2.0)]
    loss, got = early_exit_loss([exit_with(a) for a in (0.0, 1.0, 2.0)], y)
    assert [float(c) for c in got] == pytest.approx(ce, rel=1e-6)
    assert float(loss) == pytest.approx(ce[2] + (ce[0] / 3 + 2 * ce[1] / 3) / 2, rel=1e-6)
    swapped, _ = early_exit_loss([exit_with(a) for a in (1.0, 0.0, 2.0)], y)
    assert float(swapped) > float(loss)  # the deeper exit's weight is the larger one
    one, _ = early_exit_loss([exit_with(1.0)], y)
    assert float(one) == pytest.approx(ce[1], rel=1e-6)
    two, _ = early_exit_loss([exit_with(0.0), exit_with(2.0)], y)
    assert float(two) == pytest.approx(ce[2] + ce[0] / 2, rel=1e-6)


@pytest.fixture
def training(script):
    return script("training")


def test_the_training_pieces_are_the_notebook_kits(training):
    """scripts/training.py adds save_model and takes the rest from minispec.kit.training (where the
    notebooks run and show them, shipped in the wheel): said once."""
    from minispec.kit import training as kit
    shared = [name for name in training.__all__ if name != "save_model"]
    assert shared and all(getattr(training, name) is getattr(kit, name) for name in shared)
    assert "def save_model" not in Path(kit.__file__).read_text()


def random_heads(model, n, sequential, seed=0):
    heads = ms.MedusaHeads(model, n, sequential=sequential)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0, 0.3, generator=torch.Generator().manual_seed(seed))
    return heads


@pytest.mark.parametrize("sequential", [False, True], ids=["medusa", "hydra"])
def test_unroll_shapes_and_teacher_forcing(training, random_gpt, sequential):
    """unroll: head i's logits at t = 0..T-2-i, (B, T-1-i, V); Medusa head i reads h_t alone,
    Hydra's head i the chain advanced on the TRUE tokens x_{t+1}..x_{t+1+i}."""
    m = random_gpt(vocab_size=16, n_layer=1, n_embd=16, seed=3)
    heads = random_heads(m, 3, sequential)
    x = torch.randint(16, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        h = training.hidden_states(m, x)
        out = training.unroll(heads, h, x)
        assert [tuple(lg.shape) for lg in out] == [(2, 8 - i, 16) for i in range(3)]
        for t in (0, 5):
            z = h[:, t]
            for i in range(3):
                if sequential:
                    z = heads.advance(z, i, x[:, t + 1 + i])
                    want = heads.logits(z)
                else:
                    want = heads(h[:, t])[:, i]
                torch.testing.assert_close(out[i][:, t], want)


@pytest.mark.parametrize("sequential", [False, True], ids=["medusa", "hydra"])
def test_medusa_loss_known_at_init_and_decreasing(training, random_gpt, sequential):
    """Untrained heads (W = 0) repeat the target's next-token guess p_{t+1}, so the loss is
    mean_i CE(p_{t+1+i}, p_{t+1}), computed here from the target's own forward. A few AdamW steps
    lower it, and the target is neither changed nor given gradients."""
    m = random_gpt(vocab_size=16, n_layer=2, n_embd=16, seed=4)
    heads = ms.MedusaHeads(m, 2, sequential=sequential)
    x = torch.randint(16, (4, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        p = torch.softmax(m(x), -1)
        want = sum(-(p[:, 1 + i:] * p[:, :23 - i].log()).sum(-1).mean() for i in range(2)) / 2
    assert training.medusa_loss(m, heads, x).item() == pytest.approx(want.item(), rel=1e-5)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    opt, losses = torch.optim.AdamW(heads.parameters(), lr=1e-2), []
    for _ in range(15):
        loss = training.medusa_loss(m, heads, x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.95 * losses[0]
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())
    assert all(p.grad is None for p in m.parameters())


def test_get_batch_windows_and_next_byte_targets(training):
    """Random windows of the text: x and its next bytes y, both real slices; a seed repeats them."""
    text = heldout()
    x, y = training.get_batch(text, 4, 32, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])  # next-byte targets
    for row in range(4):  # every window is a real slice of the text
        i = next(i for i in range(len(text) - 32) if torch.equal(text[i:i + 32], x[row]))
        assert torch.equal(text[i + 1:i + 33], y[row])
    again = training.get_batch(text, 4, 32, torch.Generator().manual_seed(0))
    assert torch.equal(again[0], x) and torch.equal(again[1], y)


def test_lookup_ceiling_cost_model_known_answers(script):
    """benchmarks/lookup_ceiling.py's cost model, on answers worked by hand. cheapest: nothing to
    copy costs autoregressive decoding's p + N - 1; with every forward costing one step (v = 1) and
    3 tokens copyable everywhere, 9 tokens take the prompt's round (4 tokens), one more round (4)
    and a last (1); when v(k) = k (compute-bound) a drafted token costs what decoding it would, and
    only the prompt's round, charged p whatever it drafts, saves its 3."""
    ceiling = script("lookup_ceiling")
    flat, linear = [0.0] + [1.0] * 16, [float(k) for k in range(17)]
    assert ceiling.cheapest([0] * 5, flat, p=10.0) == 14.0
    assert ceiling.cheapest([3] * 9, flat, p=10.0) == 12.0
    assert ceiling.cheapest([3] * 9, linear, p=10.0) == 10.0 + 5.0
    assert ceiling.cheapest([0] + [3] * 8, linear, p=10.0) == 10.0 + 8.0  # = AR's 10 + 9 - 1


def test_lookup_ceiling_oracles_know_more_than_lookup(script):
    """The best-occurrence oracle picks the earlier match whose continuation agrees with the answer,
    where PromptLookupDrafter takes the newest; any_copy finds the answer's start anywhere."""
    ceiling = script("lookup_ceiling")
    context, rest = [1, 2, 1, 3, 1], [2, 1, 3, 1]
    lookup = ms.PromptLookupDrafter().match(context, 4)
    assert lookup == [3, 1, 3, 1]  # the newest "1" was followed by 3: none of it agrees
    assert ceiling.agree(lookup, rest) == 0
    assert ceiling.best_occurrence(context, rest) == 4  # the first "1", copied periodically
    assert ceiling.any_copy([4, 5, 6, 7], [5, 6, 9]) == 2
    assert ceiling.any_copy([4, 5], [9]) == 0
    assert ceiling.reaches([4, 5], [5, 4, 5], ceiling.any_copy) == [1, 2, 1]  # "5 4": not yet


def test_lookup_ceiling_trace_cost_reads_the_loops_rounds(script):
    """trace_cost charges the prompt's forward for the first round and v(1 + drafted) for every
    later one, read from a real decode's Result.steps."""
    ceiling = script("lookup_ceiling")
    target = ms.load_model("target")
    out = ms.speculative_generate(target, ms.PromptLookupDrafter(), ms.encode("def f(x):\n"), 24,
                                  gamma=3)
    later = out.steps[1:]
    assert later and ceiling.trace_cost(out.steps, [0.0] + [1.0] * 16, 5.0) == 5.0 + len(later)
    linear = [float(k) for k in range(17)]
    want = 5.0 + sum(1 + len(s.tree.tokens) for s in later)
    assert ceiling.trace_cost(out.steps, linear, 5.0) == want
    assert max(len(s.tree.tokens) for s in later) == 3  # gamma 3 drafted in full somewhere
    with pytest.raises(ValueError, match="measured up to k = 3"):
        ceiling.trace_cost(out.steps, linear[:4], 5.0)  # a round fed 4 tokens, v known to 3


def test_lookup_ceiling_slope_needed_known_answer(script):
    """slope_needed prices a decode's rounds under v(k) = 1 + s (k - 1): one prompt of N = 9 tokens
    and p = 1 costs 9 steps autoregressively; after the prompt's round, two rounds of 3 drafted
    cost 2 (1 + 3 s), so 9 / (3 + 6 s) >= 1.5 holds up to s = 0.5; rounds drafting nothing never
    reach 1.5x, not even with a flat profile."""
    ceiling = script("lookup_ceiling")
    tree = ms.Tree([5, 6, 7], [-1, 0, 1])
    steps = [ms.Step(tree, [], 1)] + [ms.Step(tree, [0, 1, 2], 1)] * 2
    row = {"N": 9, "p": 1.0, "drafted": {"x": steps}}
    assert ceiling.slope_needed([row], "x") == pytest.approx(0.5, abs=1e-9)
    assert ceiling.slope_needed([row], "x", bar=3.0) == pytest.approx(0.0, abs=1e-9)
    idle = {"N": 9, "p": 1.0, "drafted": {"x": [ms.Step(ms.Tree([], []), [], 1)] * 9}}
    assert ceiling.slope_needed([idle], "x") is None
