"""A GPT-2 language model over bytes, with a KV cache that can be cropped.

The architecture is GPT-2's exactly (learned positions, pre-LayerNorm with eps 1e-5, tanh-GELU,
tied input/output embeddings, biases everywhere), so weights convert losslessly to and from
`transformers`' GPT2LMHeadModel (scripts/hf.py). Two differences from nanoGPT matter for speculative
decoding: the model returns logits at *every* position (verifying gamma drafted tokens needs gamma + 1
next-token distributions from one forward pass), and the KV cache can be cropped back to any prefix
(which is how rejected draft tokens are undone).

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
    """Keys and values of every layer for the tokens seen so far, row by row for a batch.

    Storage is allocated once for `size` entries (default block_size); `lengths[b]` says how many
    of row b's entries are valid, so rolling back a rejected draft is free: `crop(n)` just sets the
    length (entries past it are never read: batch.causal_mask). A token tree needs more entries than
    positions (siblings share a position): `keep` moves the accepted branch next to the context.
    """

    def __init__(self, config, batch_size=1, size=None, device=None, dtype=None):
        shape = (config.n_layer, batch_size, config.n_head, size or config.block_size, config.n_embd // config.n_head)
        self.k, self.v = (torch.zeros(shape, device=device, dtype=dtype) for _ in "kv")
        self.lengths = [0] * batch_size

    @property
    def length(self):  # batch 1: the number of entries; with a batch, the longest row's
        return max(self.lengths)

    @length.setter
    def length(self, n):
        self.lengths = [n] * len(self.lengths)

    def crop(self, n):
        """Forget everything after the first n entries (an int, or one per row)."""
        n = [n] * len(self.lengths) if isinstance(n, int) else list(n)
        if len(n) != len(self.lengths) or not all(0 <= m <= L for m, L in zip(n, self.lengths)):
            raise ValueError(f"cannot crop a cache of lengths {self.lengths} to {n}")
        self.lengths = n

    def keep(self, start, nodes):
        """Keep entries start + i for i in `nodes` (a tree's accepted path), moved to start, start + 1, ...
        A batch: one start and one list of nodes per row (an int start: the same for every row)."""
        B = len(self.lengths)
        starts, paths = ([start] * B, [nodes] * B) if isinstance(start, int) else (start, nodes)
        for b, (s, path) in enumerate(zip(starts, paths)):
            idx = s + torch.tensor(path, dtype=torch.long, device=self.k.device)
            self.k[:, b, :, s:s + len(path)] = self.k[:, b, :, idx]  # (n_layer, H, n, hs)
            self.v[:, b, :, s:s + len(path)] = self.v[:, b, :, idx]
        self.crop([s + len(path) for s, path in zip(starts, paths)])

    def write(self, layer, k, v):
        """Store new keys/values (B, H, T, hs) after each row's own entries; return every row's keys and
        values up to the longest row (B, H, S, hs). Row b's new entries sit at lengths[b], ..."""
        B, T = k.shape[0], k.shape[2]
        if len(set(self.lengths[:B])) == 1:  # all rows equally long: one slice
            L = self.lengths[0]
            self.k[layer, :B, :, L:L + T], self.v[layer, :B, :, L:L + T] = k, v
        else:
            cols = torch.tensor(self.lengths[:B], device=k.device)[:, None] + torch.arange(T, device=k.device)
            rows = torch.arange(B, device=k.device)[:, None]  # (B, 1) with cols (B, T): row b, entry lengths[b] + t
            self.k[layer][rows, :, cols], self.v[layer][rows, :, cols] = k.transpose(1, 2), v.transpose(1, 2)
        S = max(self.lengths[:B]) + T
        return self.k[layer, :B, :, :S], self.v[layer, :B, :, :S]


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
            k, v = cache.write(layer, k, v)
        S = k.shape[2]
        if mask is None and 1 < T < S:  # plain causal attention: query i sees every key up to its own position
            mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)  # (T, S)
        elif mask is not None and mask.dim() == 3:  # one mask per row (B, T, S): broadcast over the heads
            mask = mask[:, None]
        causal = mask is None and T == S > 1  # no cache: the built-in causal mask
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)  # mask (T, S) bool: e.g. a tree
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


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
    """GPT-2. Example: GPT(GPTConfig(vocab_size=4, n_layer=1, n_head=1, n_embd=8))(torch.tensor([[1, 2]]))"""

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
        for m in self.modules():  # GPT-2's init: N(0, 0.02) weights, zero biases
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.n_layer))

    def new_cache(self, batch_size=1, size=None):
        """An empty KVCache on the weights' device and dtype (size entries, default block_size)."""
        w = self.wte.weight
        return KVCache(self.config, batch_size, size, w.device, w.dtype)

    def embed(self, idx, pos):
        """Token ids (B, T) at positions (T,) or (B, T) -> the first hidden states h_0 (B, T, C)."""
        if pos.numel() and int(pos.max()) >= self.config.block_size:
            raise ValueError(f"position {int(pos.max())} (a sequence of {int(pos.max()) + 1} tokens) exceeds "
                             f"block_size={self.config.block_size}")
        return self.wte(idx) + self.wpe(pos)

    def blocks(self, x, cache=None, layers=None, mask=None, exits=None):
        """Run blocks `layers` (default all) on x (B, T, C), which follow each row's cached entries;
        append the logits after each block to `exits` if given (the early-exit training loss)."""
        if cache is not None and cache.length + x.shape[1] > cache.k.shape[3]:
            raise ValueError(f"the KV cache holds {cache.k.shape[3]} entries, {cache.length + x.shape[1]} needed "
                             f"(block_size={self.config.block_size}; a bigger cache: new_cache(size=...))")
        for i in range(self.config.n_layer) if layers is None else layers:
            x = self.h[i](x, cache, i, mask)
            if exits is not None:
                exits.append(self.lm_head(self.ln_f(x)))
        return x

    def forward(self, idx, cache=None, pos=None, mask=None, n_layer=None, all_exits=False):
        """idx (B, T) token ids -> next-token logits at every position (B, T, V).

        cache: a KVCache; the new tokens follow its `length` cached ones and extend it (ragged rows: batch.feed).
        pos, mask: position ids (T,) and a (T, length + T) bool attention mask (default: consecutive, causal),
            to score a token tree in one pass.
        n_layer: run only the first n_layer blocks, then the shared ln_f and head (early exit);
        all_exits: instead, a list of the logits after every block (the early-exit training loss).
        """
        start = cache.length if cache is not None else 0
        if cache is not None and len(set(cache.lengths)) > 1 and (pos is None or mask is None):
            raise ValueError(f"the cache's rows have different lengths {cache.lengths}: use minispec.batch.feed")
        if pos is None:
            pos = torch.arange(start, start + idx.shape[1], device=idx.device)
        exits = [] if all_exits else None
        x = self.blocks(self.embed(idx, pos), cache, range(self.config.n_layer if n_layer is None else n_layer), mask, exits)
        if cache is not None:
            cache.lengths = [L + idx.shape[1] for L in cache.lengths]
        return exits if all_exits else self.lm_head(self.ln_f(x))  # (B, T, V)


def save_model(model, path, **card):
    """Store weights in fp16 together with the config (and any notes for the model card)."""
    state = {k: v.half() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    torch.save({"config": vars(model.config), "state_dict": state, "card": card}, path)


def load_model(name):
    """Load a shipped model ("target", "draft", "draft_distilled") or a path to a saved file: eval mode, fp32, CPU."""
    path = WEIGHTS_DIR / f"{name}.pt"
    path = path if path.exists() else Path(name)
    if not (path.suffix == ".pt" and path.exists()):
        raise ValueError(f"unknown model {name!r}: shipped models are ['draft', 'draft_distilled', 'target'], "
                         "or give a path to a .pt file")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**ckpt["config"]))
    state = {k: v.float() for k, v in ckpt["state_dict"].items()}
    state["lm_head.weight"] = state["wte.weight"]
    model.load_state_dict(state)
    return model.eval()
