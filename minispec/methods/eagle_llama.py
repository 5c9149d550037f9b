"""EAGLE-3 on a Llama target (SmolLM2-135M-Instruct): fused features, a pruned draft vocabulary,
trained on its own predictions (EAGLE-3, Li et al. 2025; EAGLE: Li et al. 2024). EAGLE sits in the
survey's section on dependent drafters (2.1.2); EAGLE-3 is not a method the survey centres on.
minispec.methods.eagle is EAGLE on the tiny byte-level GPT target.

At a position t the target computed, the head reads a fusion of a low, a middle and a high layer:

    g_t = FC_g([n(h_a)_t ; n(h_b)_t ; f_t])     (h_a, h_b: the residual stream after blocks a and b,
                                                 n(x) = x / rms(x); f = ln_f(h_N), the top feature)
    s_t = Block(FC([g_t ; e(x_{t+1})]), position t)      (one Llama block, its own KV cache)
    q_{t+2} = softmax(W_K RMSNorm(s_t)) over the K kept ids, 0 outside them.

Deeper in a draft there is no g: the head reads its own state s in its place ("training-time test":
it is trained on its own states, scripts/train_eagle_smollm2.py). The draft vocabulary is the K
most frequent ids of the training data (`keep`): q is zero elsewhere, which costs acceptance only
where the target wants another token, never exactness (verification sees that q). The drafter
watches blocks a and b of the target through forward hooks, so it sees them whoever scored the
round (a FallbackDrafter's prompt-lookup rounds too); a new reset or close() removes the hooks.
"""
import numbers
import weakref
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..bridge.llama import Block, Llama, LlamaCache, RMSNorm
from ..drafters import Drafter, pick
from ..model import WEIGHTS_DIR
from ..tree import Tree
from .args import draft_args
from .heads import fit, read

SMOLLM2 = {"n_layer": 30, "n_embd": 576, "vocab_size": 49152}  # how SmolLM2-135M is recognised
HEADS = "eagle_head.pt (minispec's byte-level GPT target), eagle_smollm2.pt (SmolLM2-135M: " \
        "a Llama with n_layer 30, n_embd 576, vocab_size 49152)"


def rms(x, eps=1e-6):
    """n(x) = x / sqrt(mean(x^2) + eps): the low and middle residual streams put on one scale."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class EagleLlamaHead(nn.Module):
    """FC_g fuses blocks a, b and the top; FC + one Llama block -> s; W_K over the kept ids.
    Example: EagleLlamaHead(target, keep=torch.arange(64), layers=(0, 1))"""

    def __init__(self, target, keep, layers=(2, 15)):
        super().__init__()
        if not isinstance(target, Llama):  # a GPT's head: eagle.EagleHead
            raise ValueError(f"target must be a Llama (smollm2.load()), got a "
                             f"{type(target).__name__}")
        c, C = target.config, target.config.n_embd
        whole_ids = isinstance(layers, (tuple, list)) and all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in layers)
        if not whole_ids or len(layers) != 2 or not 0 <= min(layers) <= max(layers) < c.n_layer:
            raise ValueError(f"layers must be two blocks of the target (0..{c.n_layer - 1}), "
                             f"got {layers}")
        if not hasattr(keep, "__len__") or torch.as_tensor(keep).is_floating_point() \
                or torch.as_tensor(keep).dtype == torch.bool:  # 1.9 would become 1, True 1
            raise ValueError(f"keep must be integer token ids, got {keep!r:.80}")
        keep = torch.as_tensor(keep, dtype=torch.long)
        if keep.dim() != 1 or not len(keep) or len(set(keep.tolist())) != len(keep) \
                or not 0 <= int(keep.min()) <= int(keep.max()) < c.vocab_size:
            raise ValueError(f"keep must be distinct token ids in [0, {c.vocab_size}), got {keep}")
        self.config = replace(c, n_layer=1)
        self.layers = tuple(int(i) for i in layers)
        self.fuse = nn.Linear(3 * C, C, bias=False)
        self.fc = nn.Linear(2 * C, C, bias=False)
        self.block = Block(self.config)
        self.norm = RMSNorm(C, c.norm_eps)
        self.lm_head = nn.Linear(C, len(keep), bias=False)
        with torch.no_grad():  # start from the target's own output rows for the kept ids
            self.lm_head.weight.copy_(target.lm_head.weight[keep])
        self.register_buffer("keep", keep, persistent=False)  # saved apart, as ids
        self.target = (target,)  # a tuple: the frozen target is no submodule (not trained, saved)
        self.accuracy = None     # accuracy[d]: held-out top-1 agreement at draft depth d + 1

    def fused(self, low, mid, f):
        """g = FC_g([n(h_a) ; n(h_b) ; f]), each (..., C) -> (..., C)."""
        return self.fuse(torch.cat([rms(low), rms(mid), f], -1))

    def forward(self, g, x, cache=None, mask=None, start=None):
        """Inputs g (B, T, C) at positions start.. and tokens x (B, T) after them -> states s."""
        start = (cache.length if cache is not None else 0) if start is None else start
        pos = torch.arange(start, start + x.shape[1], device=g.device)
        cos, sin = self.target[0].rotary(pos, g.dtype)  # the target's RoPE: its heads, its base
        e = F.embedding(x, self.target[0].wte.weight.detach())
        if mask is None and cache is not None and 1 < x.shape[1] < start + x.shape[1]:
            mask = torch.ones(x.shape[1], start + x.shape[1], dtype=torch.bool,
                              device=g.device).tril(diagonal=start)  # causal after the cache
        s = self.block(self.fc(torch.cat([g, e], -1)), cos, sin, cache, 0, mask, start)
        if cache is not None:  # as Llama.blocks: who runs the block advances the cache
            cache.length = start + x.shape[1]
        return s

    def logits(self, s):
        """States (..., C) -> logits over the kept ids (..., K)."""
        return self.lm_head(self.norm(s))

    def full_logits(self, s):
        """States (..., C) -> logits over the target's vocabulary (..., V), -inf outside `keep`:
        the q drawn from and recorded is zero there."""
        small = self.logits(s)
        out = small.new_full((*small.shape[:-1], self.target[0].config.vocab_size), -torch.inf)
        return out.index_copy(-1, self.keep, small)


def check_smollm2(target):
    """SmolLM2-135M is recognised by its config; any other target -> ValueError naming the heads."""
    c = getattr(target, "config", None)
    if not isinstance(target, Llama) or any(getattr(c, k) != v for k, v in SMOLLM2.items()):
        raise ValueError(f"no EAGLE head was trained for this {type(target).__name__}; heads were "
                         f"trained for minispec's byte-level GPT target and SmolLM2: {HEADS}")


def load_eagle_llama(target, path=None):
    """The shipped head for SmolLM2-135M-Instruct (or a saved file, for a target of its config)."""
    if path is None:
        check_smollm2(target)
    path = Path(path or WEIGHTS_DIR / "eagle_smollm2.pt")
    if not path.exists():
        raise ValueError(f"no EAGLE head at {path}: give a saved file's path, or None for the "
                         "shipped head")
    ckpt = read(path)
    if "keep" not in ckpt:  # a GPT's EAGLE head, heads, a model: not this kind of file
        raise ValueError(f"{path.name} is not a Llama's EAGLE head (saved by EagleLlamaHead)")
    head = EagleLlamaHead(target, ckpt["keep"], ckpt["layers"]).to(target.wte.weight)
    return fit(head, ckpt, path)


class EagleLlamaDrafter(Drafter):
    """The EAGLE-3 head drafting a chain of gamma tokens (no trees here: eagle.EagleDrafter has
    EAGLE-2's). The first round has no features yet: no drafts.
    Example: speculative_generate(model, EagleLlamaDrafter(load_eagle_llama(model)), ids, gamma=5)
    """

    hooks = ()  # the forward hooks on the target's blocks a and b, while drafting for it

    def __init__(self, head, branching=None, width=None, score_temperature=1.0, replacement=True):
        if branching is not None or width is not None or not replacement:
            raise ValueError("EAGLE on a Llama drafts chains: branching, width and replacement "
                             "are not supported")
        if not isinstance(head, EagleLlamaHead):  # a GPT's head: eagle.EagleDrafter
            raise ValueError(f"head must be a Llama's EAGLE head (load_eagle_llama(target)), got "
                             f"{type(head).__name__}")
        self.head = head
        self.model = head.target[0]
        self.vocab_size = self.model.config.vocab_size
        self.seen = {}
        self.fed = None  # the tokens the features cover (None: none yet)

    def close(self):
        """Remove the hooks on the target's blocks."""
        for hook in self.hooks:
            hook.remove()
        self.hooks = []

    def __del__(self):
        self.close()

    def watch(self, i):
        me = weakref.ref(self)  # the target's hook must not keep a finished drafter alive
        block = self.model.config.block_size

        def hook(module, inputs, output):  # the residual stream after block i, every call's rows
            if me() is not None:  # (early exit runs the low blocks once a draft step, then scores)
                rows = me().seen.setdefault(i, [])
                rows.append(output)
                while sum(r.shape[1] for r in rows[1:]) >= block:  # accept reads the last rows:
                    rows.pop(0)  # at most a block's, and the model may run on after the decode
        return self.model.h[i].register_forward_hook(hook)

    def reset(self, target, cache):
        if target is not self.model:
            raise ValueError("this EAGLE head was built for another model object (a reloaded "
                             "target is another one): build the drafter again on this target")
        w = self.model.wte.weight
        self.head.to(w)  # follow the target's device and dtype (model.double())
        self.close()
        self.seen = {}
        self.hooks = [self.watch(i) for i in self.head.layers]
        size = self.model.config.block_size
        self.cache = LlamaCache(self.head.config, 1, size, w.device, w.dtype)
        self.pending = w.new_zeros(0, w.shape[1])  # fused features g of positions n_ctx.. not fed
        self.n_ctx = 0  # head cache entries made of true features (entry t: position t)
        self.root = None  # the head's state after the true features, once they are fed
        self.fed = None

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, n = draft_args(context, gamma, depth)
        if n < 1 or self.fed != context[:-1]:
            return Tree()  # no features of this context yet (the first round), or no drafts wanted
        self.cache.crop(self.n_ctx)  # drafting again before accept: the drafts' entries go
        if len(self.pending):  # (else the root's state is the one the last draft computed)
            k = len(self.pending)  # true pairs (g_t, x_{t+1}) at entries n_ctx..n_ctx + k - 1
            x = torch.tensor([context[self.n_ctx + 1:self.n_ctx + 1 + k]],
                             device=self.pending.device)
            self.root = self.head(self.pending[None], x, self.cache)[0, -1]
            self.pending = self.pending[:0]
            self.n_ctx = self.cache.length
        s, tokens, qs = self.root, [], []
        for _ in range(n):
            if tokens:  # deeper: the head reads its own state s and the token it drafted
                s = self.head(s[None, None], torch.tensor([tokens[-1:]], device=s.device),
                              self.cache)[0, 0]
            token, q = pick(self.head.full_logits(s), temperature, top_k, top_p, generator)
            tokens.append(token)
            qs.append(q)
            self.calls += 1
        return Tree.chain(tokens, qs)

    def accept(self, context, tree, path, hidden, logits):
        """Fuse the features of what the target read and kept (paired with tokens next round)."""
        root = len(hidden) - len(tree.tokens) - 1
        self.cache.crop(self.n_ctx)  # drop the drafted entries
        rows = list(range(root + 1)) + [root + 1 + i for i in path]
        low, mid = (torch.cat(self.seen[i], 1)[0, -len(hidden):] for i in self.head.layers)
        self.seen = {}  # the rows scored are the last ones the blocks saw since the last round
        if len(low) != len(hidden):
            raise ValueError("the target's blocks saw other rows than it scored: one target, one "
                             "drafter per generation")
        with torch.inference_mode():
            g = self.head.fused(low[rows], mid[rows], hidden[rows])
        self.pending = torch.cat([self.pending, g])
        self.fed = list(context) + [tree.tokens[i] for i in path]
