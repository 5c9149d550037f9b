"""The shipped held-out text (minispec.kit.data): the files, the benchmark prompts, bits per byte.
(Training batches, get_batch, moved to scripts/training.py: tests/test_scripts.py.)"""
import hashlib
import math

import pytest
import torch
import torch.nn.functional as F

import minispec as ms
from minispec.kit import data


def test_heldout_files_and_tensor():
    files = data.heldout_files()
    assert data.HELD_OUT == ("calendar.py", "fractions.py", "heapq.py", "shlex.py", "statistics.py",
                             "textwrap.py")
    assert len(files) == 6 and all(isinstance(f, bytes) and len(f) > 10_000 for f in files)
    assert files[2].startswith(b'"""Heap queue algorithm')  # heapq.py
    text = data.heldout()
    assert text.dtype == torch.long and len(text) == sum(len(f) + 2 for f in files)
    n = len(files[0])
    assert bytes(text[:n].tolist()) == files[0] and text[n:n + 2].tolist() == [10, 10]


def test_prompts_are_the_old_benchmark_prompts():
    """prompts(8) are the prompts minispec.bench.bench_prompts(8) gave before the redesign (computed
    once from the old package on Python 3.11.7's standard library: their SHA-256, and the first
    one's start)."""
    p = data.prompts(8)
    assert len(p) == 8 and all(len(x) == 128 for x in p)
    assert hashlib.sha256(bytes(sum(p, []))).hexdigest()[:16] == "6fa3c1df579414e3"
    assert bytes(p[0][:40]) == b"            yield d, i % 7\n\n    def iter"


def test_prompts_start_at_line_starts_and_offset_continues():
    files = data.heldout_files()
    for i, prompt in enumerate(data.prompts(12, length=64)):
        f = files[i % 6]
        start = f.index(bytes(prompt))
        assert f[start - 1:start] == b"\n" and len(prompt) == 64
    assert data.prompts(10, offset=8) == data.prompts(18)[8:]
    assert data.prompts(3, length=16) == [p[:16] for p in data.prompts(3)]
    assert ms.data is data


def test_bits_per_byte_known_answer(random_gpt):
    """A model whose logits are all zero predicts every byte with probability 1/256: 8 bits per
    byte, at every exit, whatever the targets (so this alone cannot catch misaligned windows: see
    below)."""
    m = random_gpt(vocab_size=256, n_layer=2, n_embd=16, block_size=32)
    with torch.no_grad():
        m.wte.weight.zero_()  # tied: the head's logits are 0
    text = data.heldout()[:2000]
    bpb = data.bits_per_byte(m, text, block_size=32, max_windows=4)
    assert bpb == pytest.approx([8.0, 8.0], abs=1e-5)


def test_bits_per_byte_windows_and_next_byte_targets(random_gpt):
    """65 bytes, block 32, 2 windows: the windows are text[0:32] and text[32:64] exactly, each
    scored against the NEXT bytes (text[1:33], text[33:65]); the full model's entry is their mean
    cross-entropy / ln 2, computed here from plain forwards."""
    m = random_gpt(vocab_size=256, n_layer=2, n_embd=16, block_size=32, seed=1)
    text = data.heldout()[1000:1065]
    bpb = data.bits_per_byte(m, text, block_size=32, max_windows=2)
    with torch.no_grad():
        ce = [F.cross_entropy(m(text[s:s + 32][None])[0], text[s + 1:s + 33])
              for s in (0, 32)]
    mean = float(sum(ce)) / 2 / math.log(2)
    assert len(bpb) == 2 and bpb[-1] == pytest.approx(mean, rel=1e-5)
    with torch.no_grad():
        one = F.cross_entropy(m(text[:32][None])[0], text[1:33]) / math.log(2)
    first = data.bits_per_byte(m, text, block_size=32, max_windows=1)[-1]
    assert first == pytest.approx(float(one), rel=1e-5)


def test_shipped_target_beats_uniform_on_heldout(shipped):
    """The shipped target, on a few windows of the held-out text, needs fewer than 8 bits per byte
    (what a uniform guess over 256 bytes needs), at every exit."""
    bpb = data.bits_per_byte(shipped, data.heldout(), block_size=64, max_windows=4)
    assert len(bpb) == shipped.config.n_layer and all(b < 8 for b in bpb)
