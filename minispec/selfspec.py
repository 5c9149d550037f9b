"""Self-speculation (survey section 2.1.2): the target drafts for itself, no second model. The Drafters:
early exit, Medusa / Hydra heads, Jacobi / lookahead decoding. Heads and lookahead guess deterministically
(q None; verify.verify_tree says why that is lossless).
"""
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .drafters import Drafter, pick, unsure
from .model import WEIGHTS_DIR
from .tree import Tree


def early_exit_loss(exits, y):
    """LayerSkip's loss: final-layer cross-entropy plus the earlier exits, weighted l / N (deeper exits
    count more), loss = CE(exit_N) + sum_{l<N} (l / N) CE(exit_l) / (N - 1). -> (loss, [CE of each exit])"""
    N = len(exits)
    ce = [F.cross_entropy(e.flatten(0, 1), y.flatten()) for e in exits]
    return ce[-1] + sum(l / N * ce[l - 1] for l in range(1, N)) / max(N - 1, 1), ce


class EarlyExitDrafter(Drafter):
    """Early exit (LayerSkip, Elhoushi et al. 2024): blocks 1..k + the shared ln_f and head draft,
    q = softmax(head(ln_f(h_k))), on the loop's ONE KV cache; `score` reuses the drafts' entries in blocks
    1..k and their h_k, and runs only blocks k+1..N: nothing is computed twice. threshold: end a round after
    the first draft whose exit-k max softmax is below it (the confidence stop of Draft & Verify, Zhang et
    al. 2024, who skip intermediate layers rather than exit early).
    Example: speculative_generate(target, EarlyExitDrafter(target, k=2), encode("def "), 16, gamma=4)
    """

    def __init__(self, model, k=2, threshold=None):
        N = model.config.n_layer
        if int(k) != k or not 1 <= k <= N - 1:
            raise ValueError(f"exit layer k must be an integer in 1..n_layer-1 = 1..{N - 1}, got {k}")
        if threshold is not None and not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be in [0, 1] or None, got {threshold}")
        self.model, self.k, self.threshold, self.vocab_size = model, int(k), threshold, model.config.vocab_size
        self.reset(model, model.new_cache())

    def reset(self, target, cache):
        if target is not self.model:
            raise ValueError("an EarlyExitDrafter drafts for the model it was built on: pass that model as the target")
        self.cache, self.shallow, self.deep = cache, 0, 0  # entries valid in blocks < k / blocks >= k
        self.h = []  # h_k (1, T, C) of positions deep..shallow-1: waiting for blocks k..N-1

    def _shallow(self, seq):  # blocks < k on the tokens not seen yet -> their h_k (1, T, C), kept
        pos = torch.arange(self.shallow, len(seq), device=self.model.wte.weight.device)
        x = self.model.embed(torch.tensor([seq[self.shallow:]], device=pos.device), pos)
        self.cache.length = self.shallow
        self.h.append(self.model.blocks(x, self.cache, range(self.k)))
        self.shallow = len(seq)
        return self.h[-1]

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        seq, qs = list(context), []
        for _ in range(gamma if depth is None else min(gamma, depth)):
            logits = self.model.lm_head(self.model.ln_f(self._shallow(seq)[0, -1]))  # (V,)
            self.calls += 1
            seq.append(pick(logits, qs, temperature, top_k, top_p, generator))
            if unsure(logits, self.threshold):
                break  # verify now (the unsure draft itself may well be right)
        return Tree.chain(seq[len(context):], qs)

    @torch.inference_mode()
    def score(self, target, cache, context, tree):
        seq = context + tree.tokens
        self._shallow(seq)  # blocks < k on the one token never fed: the last draft (the context's last if none)
        self.cache.length = self.deep
        h = self.model.ln_f(self.model.blocks(torch.cat(self.h, 1), self.cache, range(self.k, self.model.config.n_layer)))
        self.cache.length, self.deep, self.h = len(seq), len(seq), []
        return h[0], self.model.lm_head(h[0])

    def accept(self, context, tree, path, hidden, logits):
        self.shallow = self.deep = len(context) + len(path)  # the loop cropped the cache there


def hidden_states(model, idx):  # idx (B, T) -> ln_f(h_N) (B, T, C): what lm_head, the heads and EAGLE read
    return model.ln_f(model.blocks(model.embed(idx, torch.arange(idx.shape[1], device=idx.device))))


class MedusaHeads(nn.Module):
    """Medusa (Cai et al. 2024) head i: logits_i = lm_head(h_t + SiLU(W_i h_t + b_i)) guesses token t + 2 + i;
    W_i = 0 at first, so an untrained head repeats the target's next-token guess (Medusa-1's init).
    sequential=True (Hydra, Ankner et al. 2024): head i also reads the token before its guess,
        z_0 = h_t,  z_{i+1} = z_i + SiLU(W_i [z_i; e(x_{t+1+i})] + b_i),  logits_i = lm_head(z_{i+1}),
    so each guess is conditioned on the path drafted so far (e: the target's own embedding).
    Example: MedusaHeads(load_model("target"), n_heads=4)(torch.zeros(256)).shape == (4, 256)
    """

    def __init__(self, model, n_heads=4, sequential=False):
        super().__init__()
        if int(n_heads) != n_heads or n_heads < 1:
            raise ValueError(f"n_heads must be an integer >= 1, got {n_heads}")
        C, self.sequential = model.config.n_embd, bool(sequential)
        self.res = nn.ModuleList(nn.Linear(2 * C if sequential else C, C) for _ in range(n_heads))
        for lin in self.res:
            nn.init.zeros_(lin.weight), nn.init.zeros_(lin.bias)
        self.target = (model,)  # a tuple: the frozen target is not a submodule (neither trained nor saved)
        self.accuracy = None  # accuracy[i][r]: how often head i's rank-r guess is the target's token

    def logits(self, z):
        return F.linear(z, self.target[0].lm_head.weight.detach())

    def forward(self, h):  # (..., C) -> (..., n_heads, V), Medusa-1 heads only
        if self.sequential:
            raise ValueError("sequential heads need the drafted tokens: use advance() or unroll()")
        return torch.stack([self.logits(h + F.silu(lin(h))) for lin in self.res], -2)

    def advance(self, z, i, token):
        """Sequential head i: z_i (..., C) and the token x_{t+1+i} (...) -> z_{i+1}; lm_head(z_{i+1}) guesses."""
        e = F.embedding(torch.as_tensor(token, device=z.device), self.target[0].wte.weight.detach())  # target frozen
        return z + F.silu(self.res[i](torch.cat([z, e], -1)))

    def unroll(self, h, x):
        """h (B, T, C) the hidden states of x (B, T) -> [head i's logits at t = 0..T-2-i: (B, T-1-i, V)]."""
        T, z, out = x.shape[1], h, []
        if not self.sequential:
            return [lg[:, :T - 1 - i] for i, lg in enumerate(self(h[:, :T - 1]).unbind(-2))]
        for i in range(len(self.res)):  # teacher forcing: head i reads the true token x_{t+1+i}
            z = self.advance(z[:, :T - 1 - i], i, x[:, 1 + i:])
            out.append(self.logits(z))
        return out


def medusa_loss(model, heads, x):
    """Self-distillation (Medusa-1): head i at t matches the target's own p at t + 1 + i (the frozen target's
    distribution of the token it guesses), L = mean_i CE(p_{t+1+i}, softmax(logits_i(t)))."""
    with torch.no_grad():
        h = hidden_states(model, x)  # (B, T, C)
        p = torch.softmax(model.lm_head(h), -1)  # (B, T, V)
    out = heads.unroll(h, x)
    return sum(-(p[:, 1 + i:] * torch.log_softmax(lg, -1)).sum(-1).mean() for i, lg in enumerate(out)) / len(out)


def load_heads(model, name="medusa"):
    """The shipped heads on top of `model`: "medusa", "hydra" (sequential), or a path to a saved file."""
    path = WEIGHTS_DIR / f"{name}_heads.pt" if name in ("medusa", "hydra") else Path(name)
    if not path.exists():
        raise ValueError(f"no heads {name!r}: the shipped heads are 'medusa' and 'hydra', or give a saved file's path")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    heads = MedusaHeads(model, ckpt["n_heads"], ckpt.get("sequential", False)).to(model.wte.weight)
    heads.load_state_dict(ckpt["state_dict"])  # fp16 on disk, copied into the model's device and dtype
    heads.accuracy = ckpt["accuracy"]
    return heads.eval()


def medusa_tree(accuracy, size=8):
    """Medusa's static tree: the `size` rank paths (r_1, .., r_d) with the largest expected gain
    prod_i accuracy[i][r_i], picked greedily (a prefix never scores lower, so the set is a tree)."""
    paths, frontier = [], {(r,): a for r, a in enumerate(accuracy[0])}
    while len(paths) < size and frontier:
        best = max(frontier, key=frontier.get)
        value, _ = frontier.pop(best), paths.append(best)
        if len(best) < len(accuracy):
            frontier.update({best + (r,): value * a for r, a in enumerate(accuracy[len(best)])})
    return paths


class HeadDrafter(Drafter):
    """Medusa / Hydra heads' ranked guesses on a static tree of rank paths like [(0,), (1,), (0, 0)] (default:
    the gamma paths of medusa_tree(heads.accuracy)); the first round has no hidden state yet and drafts nothing."""

    def __init__(self, heads, tree=None):  # e.g. HeadDrafter(load_heads(target, "hydra"))
        self.model, self.heads, self.tree, self.h = heads.target[0], heads, tree, None
        if tree is not None and (not tree or max(map(len, tree)) > len(heads.res)):
            raise ValueError(f"tree must be a non-empty list of rank paths no longer than n_heads={len(heads.res)}")

    def reset(self, target, cache):
        if target is not self.model:
            raise ValueError("these heads were trained on another model: pass the heads' own target")
        self.h = None

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        if self.h is None or gamma < 1:
            return Tree()
        ranks = self.tree or medusa_tree(self.heads.accuracy or [[1.0]] * len(self.heads.res), gamma)
        ranks = [path[:depth] for path in ranks]
        R = 1 + max(max(r) for r in ranks)  # guesses needed per head
        self.calls += 1
        if not self.heads.sequential:  # one look at h: head d's rank-r guess, whatever came before
            top = self.heads(self.h).topk(R, -1).indices.tolist()  # (K, R)
            return Tree.from_paths([[top[d][r] for d, r in enumerate(path)] for path in ranks], gamma)
        z, tokens = {(): self.h}, {(): [context[-1]]}  # rank prefix -> the z its children read; root token + its path
        for d in range(max(map(len, ranks))):  # one batched head call per depth, on the prefixes of length d
            level = sorted({path[:d] for path in ranks if len(path) > d})
            zs = self.heads.advance(torch.stack([z[pre] for pre in level]), d, [tokens[pre][-1] for pre in level])
            top = self.heads.logits(zs).topk(R, -1).indices.tolist()  # (len(level), R)
            for pre, z_next, row in zip(level, zs, top):
                for r, t in enumerate(row):
                    z[pre + (r,)], tokens[pre + (r,)] = z_next, tokens[pre] + [t]
        return Tree.from_paths([tokens[path][1:] for path in ranks], gamma)

    def accept(self, context, tree, path, hidden, logits):
        root = len(hidden) - len(tree.tokens) - 1
        self.h = hidden[root + 1 + path[-1] if path else root]  # the hidden state that predicted the target's token


class Lookahead(Drafter):
    """Jacobi (Santilli et al. 2023; candidates=0) and lookahead decoding (Fu et al. 2024), not ones the survey centres
    on: draft the last token + W guesses (+ up to `candidates` pooled n-grams that start with it); the target's
    outputs, shifted past what was accepted, are the next guesses.
    Example: speculative_generate(target, Lookahead(target), ids, 32, gamma=10)"""

    def __init__(self, model, window=4, ngram=3, candidates=3):
        for name, v, lo in (("window", window, 1), ("ngram", ngram, 2), ("candidates", candidates, 0)):
            if int(v) != v or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v}")
        self.model, self.window, self.ngram, self.candidates = model, int(window), int(ngram), int(candidates)
        self.reset(model, None)

    def reset(self, target, cache):
        self.guess, self.pool, self.hist, self.drafted = [], {}, [], False

    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None, depth=None):
        self.W, self.drafted = min(self.window, gamma, gamma if depth is None else depth), True
        self.inputs = [context[-1]] + (self.guess + [context[-1]] * self.W)[:self.W]
        grams = self.pool.get(context[-1], [])[-self.candidates:] if self.candidates else []
        return Tree.from_paths([self.inputs[1:]] + [list(c)[:depth] for c in grams], gamma)

    def accept(self, context, tree, path, hidden, logits):
        if not self.drafted:  # another drafter (inside a FallbackDrafter) drafted this round
            self.guess = []
            return
        root = len(logits) - len(tree.tokens) - 1
        out = logits[root:root + self.W + 1].argmax(-1).tolist()  # out[j]: the target's token after window node j (0: root)
        self._harvest(len(context) - 1, self.inputs, out)
        self.guess, self.drafted = out[len(path) + 1:], False

    def _harvest(self, start, inputs, out):
        """n-grams along the Jacobi trajectory: the inputs at P-n+2..P-1 in the previous n-2 rounds,
        this round's input at P and the target's output after it (lookahead decoding's diagonals)."""
        n, cur = self.ngram, {start + j: t for j, t in enumerate(inputs)}
        for P, t in cur.items() if len(self.hist) >= n - 2 else ():
            gram = [self.hist[i - (n - 2)].get(P - (n - 2) + i) for i in range(n - 2)] + [t, out[P - start]]
            if None not in gram:  # the newest last, no repeats
                rest = tuple(gram[1:])
                self.pool[gram[0]] = [g for g in self.pool.get(gram[0], []) if g != rest] + [rest]
        self.hist = (self.hist + [cur])[-(n - 2):] if n > 2 else []
