"""A GPT-2 language model over bytes, with a KV cache that can be cropped.

The architecture is GPT-2's exactly (learned positions, pre-LayerNorm with eps 1e-5, tanh-GELU,
tied input/output embeddings, biases everywhere), so weights convert losslessly to and from
`transformers`' GPT2LMHeadModel (see `to_hf_state_dict` / `from_hf_state_dict`).

Two differences from nanoGPT matter for speculative decoding:
  * the model returns logits at *every* position: verifying gamma drafted tokens needs gamma + 1
    next-token distributions from one forward pass;
  * the KV cache can be cropped back to any prefix, which is how rejected draft tokens are undone.

References: Radford et al. 2019 (GPT-2); Karpathy's nanoGPT.
"""
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

WEIGHTS_DIR = Path(__file__).parent / "weights"


@dataclass
class GPTConfig:
    vocab_size: int = 256   # bytes: any text (and any binary) can be encoded
    block_size: int = 256   # longest context, prompt and generated tokens together
    n_layer: int = 6        # transformer blocks
    n_head: int = 6         # attention heads per block
    n_embd: int = 384       # width of the residual stream


def encode(text):
    """Text -> list of byte values. Example: encode("hi") == [104, 105]"""
    return list(text.encode("utf-8"))


def decode(ids):
    """List of byte values -> text; bytes that are not valid UTF-8 become U+FFFD."""
    return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


class KVCache:
    """Keys and values of every layer for the tokens seen so far.

    Storage is allocated once for `size` entries (default block_size); `length` says how many are
    valid. Rolling back after a rejected draft is therefore free: `crop(n)` just sets `length = n`.
    A drafter growing a token tree needs more entries than positions: siblings share a position.
    """

    def __init__(self, config, batch_size=1, size=None):
        hs = config.n_embd // config.n_head
        shape = (config.n_layer, batch_size, config.n_head, size or config.block_size, hs)
        self.k, self.v = torch.zeros(shape), torch.zeros(shape)
        self.length = 0

    def crop(self, n):
        """Forget everything after the first n positions."""
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot crop a cache of length {self.length} to {n}")
        self.length = n


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x, cache=None, layer=0, mask=None):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hs)
        if cache is not None:  # write the new keys/values after the cached ones, attend to all
            L = cache.length
            cache.k[layer, :B, :, L:L + T] = k
            cache.v[layer, :B, :, L:L + T] = v
            k, v = cache.k[layer, :B, :, :L + T], cache.v[layer, :B, :, :L + T]
        if mask is None:  # plain causal attention: query i sees every key up to its own position
            S = k.shape[2]
            if T == 1:
                y = F.scaled_dot_product_attention(q, k, v)
            elif S == T:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                causal = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)  # (T, S)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        else:  # an explicit (T, S) boolean mask, e.g. tree attention
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # GPT-2's "gelu_new"


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.mlp = MLP(config)

    def forward(self, x, cache=None, layer=0, mask=None):
        x = x + self.attn(self.ln_1(x), cache, layer, mask)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2. `model(idx)` returns next-token logits at every position: (B, T, V).

    Example: GPT(GPTConfig(vocab_size=4, n_layer=1, n_head=1, n_embd=8))(torch.tensor([[1, 2]]))
    """

    def __init__(self, config):
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(f"n_embd={config.n_embd} must be divisible by n_head={config.n_head}")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=1e-5)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings, as in GPT-2
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def new_cache(self, batch_size=1, size=None):
        return KVCache(self.config, batch_size, size)

    def forward(self, idx, cache=None, n_layer=None, pos=None, mask=None, all_exits=False):
        """idx (B, T) token ids -> logits (B, T, V).

        cache:   a KVCache; the new tokens follow its `length` cached ones, and it is extended.
        n_layer: run only the first n_layer blocks, then the shared ln_f and head (early exit).
        pos, mask: explicit position ids (T,) and a (T, length + T) boolean attention mask, for
                 scoring a token tree in one pass. Default: consecutive positions, causal mask.
        all_exits: return a list with the logits after every block (the early-exit training loss).
        """
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        last = start + T - 1 if pos is None or T == 0 else int(pos.max())  # the furthest position fed
        if last >= self.config.block_size:
            raise ValueError(f"position {last} (a sequence of {last + 1} tokens) exceeds block_size={self.config.block_size}")
        if pos is None:
            pos = torch.arange(start, start + T)
        if cache is not None and start + T > cache.k.shape[3]:
            raise ValueError(f"the KV cache holds {cache.k.shape[3]} entries, {start + T} needed (block_size="
                             f"{self.config.block_size}; a bigger cache: new_cache(size=...))")
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        exits = []
        for i, block in enumerate(self.h[:n_layer]):
            x = block(x, cache, i, mask)
            if all_exits:
                exits.append(self.lm_head(self.ln_f(x)))
        if cache is not None:
            cache.length = start + T
        return exits if all_exits else self.lm_head(self.ln_f(x))  # (B, T, V)


def save_model(model, path, **card):
    """Store weights in fp16 together with the config (and any notes for the model card)."""
    state = {k: v.half() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    torch.save({"config": vars(model.config), "state_dict": state, "card": card}, path)


def load_model(name):
    """Load a shipped model ("target" or "draft") or a path to a saved file: eval mode, fp32, CPU."""
    path = WEIGHTS_DIR / f"{name}.pt"
    if not path.exists():
        path = Path(name)
        if not (path.suffix == ".pt" and path.exists()):
            shipped = sorted(p.stem for p in WEIGHTS_DIR.glob("*.pt"))
            raise ValueError(f"unknown model {name!r}: shipped models are {shipped}, or give a path to a .pt file")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**ckpt["config"]))
    state = {k: v.float() for k, v in ckpt["state_dict"].items()}
    state["lm_head.weight"] = state["wte.weight"]
    model.load_state_dict(state)
    return model.eval()


# --- transformers' GPT2LMHeadModel uses Conv1D layers: the same weights, transposed ---
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def to_hf_state_dict(model):
    """minispec GPT -> state dict for transformers.GPT2LMHeadModel (load with strict=False)."""
    out = {}
    for k, v in model.state_dict().items():
        out[k if k.startswith("lm_head") else "transformer." + k] = v.t() if k.endswith(_CONV1D) else v
    return out


def from_hf_state_dict(state, config):
    """transformers.GPT2LMHeadModel state dict -> minispec GPT (the inverse of to_hf_state_dict)."""
    model = GPT(config)
    ours = {}
    for k, v in state.items():
        if k.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # HF's causal-mask buffers, not weights
        k = k.removeprefix("transformer.")
        ours[k] = v.t() if k.endswith(_CONV1D) else v
    ours.setdefault("lm_head.weight", ours["wte.weight"])
    model.load_state_dict(ours)
    return model.eval()
