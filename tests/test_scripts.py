"""The tooling that made the shipped weights (scripts/), smoke-tested at tiny sizes so that every weight
file stays reproducible by the command the model card documents; and the benchmarks' helpers (score
calibration, the speedup predicted with prefill, paired timing).

Training reads the local standard library (scripts/train.py: corpus_files); here the corpus is the
shipped held-out text instead (fast, and the same on every machine). Nothing is written outside tmp_path.
"""
import re

import pytest
import torch

import minispec as ms
from minispec.data import DATA_DIR, HELD_OUT, heldout
from minispec.model import WEIGHTS_DIR
from minispec.selfspec import HeadDrafter, load_heads


@pytest.fixture
def train(script, monkeypatch):
    """scripts/train.py, reading the shipped held-out files as its corpus (train and held-out alike)."""
    mod = script("train")
    files = [DATA_DIR / f"{name}.txt" for name in HELD_OUT]
    monkeypatch.setattr(mod, "corpus_files", lambda: (files, files))
    return mod


TINY = dict(n_layer=2, n_head=2, n_embd=16, steps=3, batch_size=2, lr=1e-3, early_exit=True, block_size=32)


def test_train_a_tiny_model_reproducibly(train, tmp_path, capsys):
    model, bpb = train.train("tiny", out=tmp_path / "a.pt", **TINY)
    assert len(bpb) == 2 and all(0 < b < 9 for b in bpb)  # bits per byte of each exit (8 = uniform)
    loaded = ms.load_model(str(tmp_path / "a.pt"))
    card = torch.load(tmp_path / "a.pt", weights_only=True)["card"]
    assert card["steps"] == 3 and card["early_exit"] and card["held_out_bits_per_byte"] == bpb
    assert loaded.config.n_layer == 2 and "saved" in capsys.readouterr().out
    train.train("tiny", out=tmp_path / "b.pt", **TINY)  # the same seed: the same weights, bit for bit
    again = torch.load(tmp_path / "b.pt", weights_only=True)["state_dict"]
    first = torch.load(tmp_path / "a.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_distill_runs(train, tmp_path):
    model, before, after = train.distill(steps=2, batch_size=2, block_size=32, out=tmp_path / "d.pt")
    assert all(0 <= x <= 1 for x in before + after)
    card = torch.load(tmp_path / "d.pt", weights_only=True)["card"]
    assert card["distilled_from"] == "target" and card["steps"] == 2
    assert vars(ms.load_model(str(tmp_path / "d.pt")).config) == vars(ms.load_model("draft").config)


@pytest.mark.parametrize("sequential", [False, True], ids=["medusa", "hydra"])
def test_train_heads_save_load(script, shipped, tmp_path, sequential):
    """A few steps of head training on the shipped target, saved and loaded back (fp16): the heads, their
    accuracy (which shapes the default tree) and a working drafter; the same seed gives the same heads."""
    th = script("train_heads")
    text = heldout()
    heads = th.train_heads(shipped, n_heads=2, steps=2, batch_size=2, block_size=32, data=text, held=text[:2049],
                           sequential=sequential, log_every=0)
    assert len(heads.accuracy) == 2 and all(len(a) == 4 and all(0 <= x <= 1 for x in a) for a in heads.accuracy)
    th.save_heads(heads, tmp_path / "h.pt", command="test")
    back = load_heads(shipped, str(tmp_path / "h.pt"))
    assert back.sequential == sequential and back.accuracy == heads.accuracy
    for (k, a), (_, b) in zip(heads.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a.half().float(), b), k
    ids = ms.encode("def fib(n):")
    res = ms.speculative_generate(shipped, HeadDrafter(back), ids, 16, gamma=4)
    assert res.tokens == ms.generate(shipped, ids, 16).tokens
    same = th.train_heads(shipped, n_heads=2, steps=2, batch_size=2, block_size=32, data=text, held=text[:2049],
                          sequential=sequential, log_every=0)
    assert all(torch.equal(a, b) for a, b in zip(heads.state_dict().values(), same.state_dict().values()))


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
    assert head_accuracy(m, heads, [x[0], x[1]]) == head_accuracy(m, heads, flat, block_size=32, max_windows=2)


def test_the_model_card_documents_a_command_for_every_weight_file():
    """Each shipped weight file is reproduced by a documented `python scripts/...` command whose script exists."""
    card = (WEIGHTS_DIR / "README.md").read_text()
    commands = re.findall(r"python (scripts/\w+\.py)([^`\n]*)", card)
    assert commands and all((WEIGHTS_DIR.parents[1] / path).exists() for path, _ in commands)
    assert "python -m minispec.train" not in card and "minispec.selfspec train" not in card
    documented = {"target.pt": "--model target", "draft.pt": "--model draft", "draft_distilled.pt": "--distill",
                  "medusa_heads.pt": "train_heads.py --steps", "hydra_heads.pt": "--sequential"}
    lines = card.splitlines()
    for f in sorted(p.name for p in WEIGHTS_DIR.glob("*.pt")):
        assert f in documented or f == "eagle_head.pt", f"{f}: add it to this test and the model card"
        flag = documented.get(f, "train_eagle.py")
        assert any(flag in line and "python scripts/" in line for line in lines), f


def test_fit_score_temperature(script, random_gpt):
    """Temperature scaling (benchmarks/drafters_trees.py) recovers a known temperature: tokens drawn from
    softmax(2 z) are best explained by logits z at t = 0.5. Along greedy runs, a draft that IS the target
    always has the token on top, so the sharpest t wins; an unrelated draft is mostly wrong and is best flattened."""
    bench = script("drafters_trees")
    z = torch.randn(20_000, 6, generator=torch.Generator().manual_seed(0))
    drawn = torch.multinomial(torch.softmax(2 * z, -1), 1, generator=torch.Generator().manual_seed(1))[:, 0]
    assert bench.fit_score_temperature(z, drawn) == 0.5
    assert bench.fit_score_temperature(2 * z, drawn) == 1
    target, other = random_gpt(vocab_size=16, n_layer=2, seed=1), random_gpt(vocab_size=16, n_layer=1, seed=5)
    prompts, grid = [[1, 2, 3], [4, 5]], (0.5, 1, 2, 4)
    logits, tokens = bench.greedy_draft_logits(target, target, prompts, 20)
    assert logits.shape == (40, 16) and tokens.tolist() == sum((ms.generate(target, p, 20).tokens for p in prompts), [])
    assert bench.fit_score_temperature(logits, tokens, grid) == 0.5
    assert bench.fit_score_temperature(*bench.greedy_draft_logits(target, other, prompts, 20), grid) > 1


def test_predicted_speedup_with_prefill_known_answer(script):
    """Same setting, 100 new tokens after a prompt whose prefill costs 10 target steps (draft: 1):
        autoregressive: 10 + 100 = 110 target steps
        speculative:    10 + 1 + 100 * 1.4 / 3.3616 = 52.647...
        speedup         = 110 / 52.647 = 2.0894...
    No prefill gives the steady-state formula (theory.speedup); an endless prompt gives no speedup at all."""
    predicted_speedup = script("bench").predicted_speedup
    assert predicted_speedup(0.8, 4, 0.1, 1.0, 100, prefill=10, draft_prefill=1) == pytest.approx(
        110 / (11 + 100 * 1.4 / 3.3616))
    assert predicted_speedup(0.8, 4, 0.1, 1.0, 100) == pytest.approx(ms.speedup(0.8, 4, 0.1))
    assert predicted_speedup(0.8, 4, 0.1, 1.0, 100, prefill=1e9) == pytest.approx(1.0, abs=1e-6)


def test_batching_benchmark_smoke(script, capsys):
    """benchmarks/batching.py runs end to end on a tiny setting, and every row equals autoregressive decoding."""
    script("batching").main(["--prompts", "3", "--max-new-tokens", "4", "--batches", "1", "2", "--gammas", "2",
                             "--repeats", "1", "--temperatures", "0"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(rows) == 2 and all(line.rstrip().endswith("| 0 |") for line in rows)  # rows != AR: none


def test_eagle3_experiment_smoke(script, capsys):
    """scripts/eagle3_experiment.py trains both heads a few steps and prints one accuracy row for each."""
    script("eagle3_experiment").main(["--steps", "2", "--batch-size", "2", "--block-size", "16", "--windows", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("| EAGLE", "| fused"))]
    assert len(rows) == 2 and all(len(line.split("/")) == 5 for line in rows)  # depths 1-5


def test_paired_timing_alternates_and_keeps_each_sides_best(script, monkeypatch):
    """benchmarks/common.paired (every benchmark's speedup): the two sides take turns, each side's time is its
    fastest run (a slow spell on a shared machine only adds time), and the results come back with the times."""
    common, clock, order = script("common"), [0.0], []
    monkeypatch.setattr(common.time, "perf_counter", lambda: clock[0])

    def side(name, durations):
        def run():
            order.append(name)
            clock[0] += durations.pop(0)  # this run takes that long on the fake clock
            return name
        return run
    base, method, t_base, t_method = common.paired(side("ar", [5.0, 2.0, 9.0]), side("spec", [4.0, 7.0, 1.0]))
    assert order == ["ar", "spec"] * 3 and (base, method) == ("ar", "spec")
    assert (t_base, t_method) == (2.0, 1.0)
    assert common.spread([1.0, 2.0, 4.0]) == "2.00x (1.00-4.00)"
    with pytest.raises(ValueError, match="repeats"):
        common.paired(side("ar", []), side("spec", []), repeats=0)
