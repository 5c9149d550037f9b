"""Notebook 10's GPT-2 section, run without a download: two tiny random GPT-2 checkpoints and a
byte-level BPE tokenizer are written to disk, `load_gpt2` reads them, and the notebook's own
section-3 cells (tagged "gpt2") run on them as they would on Colab on gpt2-large and gpt2.

Offline, those cells load only checkpoints already on disk (`local_files_only`), so a directory
stands in for a hub name. tests/test_hf.py checks the conversion itself on random models of
several shapes; this file checks the path the notebook takes through it. Skipped without
transformers (pip install minispec[hf]), except in CI (MINISPEC_REQUIRE_REAL), which installs it.
"""
import importlib
import json
import os
from pathlib import Path

import pytest
import torch

import minispec as ms

transformers = (importlib.import_module("transformers") if os.environ.get("MINISPEC_REQUIRE_REAL")
                else pytest.importorskip("transformers"))  # CI installs it: a failure there

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "10_production.ipynb"
TEXT = "The capital of France is Paris. The capital of Germany is"


def byte_symbols():
    """GPT-2's byte -> printable character table (its byte-level BPE's alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = dict(zip(printable, printable)), 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return {b: chr(c) for b, c in chars.items()}


def byte_tokenizer():
    """A GPT-2-style tokenizer with no merges: token id = byte value (256 tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    vocab = {ch: b for b, ch in byte_symbols().items()}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tk)


def random_gpt2(seed, near=None):
    """A 2-layer GPT-2 with weights ~ N(0, 0.3) (logits far from uniform, so no near-ties); with
    `near`, 0.2 x that plus near's weights (a draft that agrees with the target part of the
    time)."""
    config = transformers.GPT2Config(vocab_size=256, n_positions=256, n_embd=32, n_layer=2,
                                     n_head=2, bos_token_id=None, eos_token_id=None)
    model, g = transformers.GPT2LMHeadModel(config).eval(), torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3, generator=g)
        if near is not None:
            for p, q in zip(model.parameters(), near.parameters()):
                p.mul_(0.2).add_(q)
    return model


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """(target directory, draft directory, the target as a transformers model)."""
    root = tmp_path_factory.mktemp("gpt2")
    big = random_gpt2(0)
    small = random_gpt2(1, near=big)
    for name, model in [("big", big), ("small", small)]:
        model.save_pretrained(root / name)
        byte_tokenizer().save_pretrained(root / name)
    return str(root / "big"), str(root / "small"), big


def test_load_gpt2_reads_a_checkpoint_and_its_tokenizer(checkpoints):
    from minispec.bridge.hf import load_gpt2
    path, _, hf_big = checkpoints
    model, encode, decode = load_gpt2(path)
    ids = encode(TEXT)
    assert ids == list(TEXT.encode()) and decode(ids) == TEXT
    x = torch.tensor([ids])
    with torch.no_grad():
        torch.testing.assert_close(model(x), hf_big(x).logits, atol=1e-5, rtol=1e-5)


def cells(tags):
    nb = json.loads(NOTEBOOK.read_text())
    return ["".join(c["source"]) for c in nb["cells"]
            if c["cell_type"] == "code" and set(c["metadata"].get("tags", [])) & set(tags)]


def test_the_notebooks_gpt2_cells_run_on_random_checkpoints(checkpoints, capsys, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing here may reach the hub
    monkeypatch.delenv("MINISPEC_ONLINE", raising=False)
    target_dir, draft_dir, _ = checkpoints
    threads = torch.get_num_threads()
    names = cells(["gpt2-names"])
    section = cells(["gpt2"])
    assert len(names) == 1 and len(section) >= 4, "notebook 10's GPT-2 cells are no longer tagged"
    ns = {}
    try:
        for source in cells(["imports", "hf-helper"]) + names:
            exec(compile(source, f"{NOTEBOOK.name}: setup", "exec"), ns)
        assert not ns["ONLINE"] and ns["TARGET_NAME"] in ("gpt2-xl", "gpt2-large")
        ns.update(TARGET_NAME=target_dir, DRAFT_NAME=draft_dir)  # directories for hub names
        for i, source in enumerate(section):
            exec(compile(source, f"{NOTEBOOK.name}: GPT-2 cell {i}", "exec"), ns)
    finally:
        torch.set_num_threads(threads)  # the notebook's setup sets one thread
        plt.close("all")
    out = capsys.readouterr().out
    assert ns["GPT2"] and "Skipped" not in out
    assert "same tokens" in out and out.count("tokens per target call") == 3
    res = ms.speculative_generate(ns["big"], ns["small"], ns["ids"], 32, gamma=4)
    assert 0 < res.stats.kept_fraction < 1  # rounds that kept drafts, and rounds that did not
