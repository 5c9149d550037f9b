"""Self-speculation: the target drafts for itself, no second model (survey section 2.1.2).

  * Early exit (LayerSkip, Elhoushi et al. 2024): blocks 1..k + the shared ln_f and head draft,
    q = softmax(head(ln_f(h_k))), on ONE KV cache: verification reuses the drafts' entries in
    blocks 1..k and their h_k, and runs only blocks k+1..N. Nothing is computed twice.
  * Medusa (Cai et al. 2024): head i reads the last hidden state h_t and guesses token t + 2 + i;
    a static tree of the heads' ranked guesses is scored in one target call (tree attention).
  * Jacobi / lookahead (Santilli et al. 2023; Fu et al. 2024): guess W tokens, take the target's
    outputs on them as the next guess (fixed-point iteration); lookahead adds n-grams pooled
    from that trajectory as extra branches.
Deterministic guesses are verified by walking the tree: draw x ~ p (argmax at temperature 0),
step into the child holding x if any. Every token is a draw from p: lossless. Medusa's typical
acceptance (tree.typical_accept) is the faster, lossy alternative.
"""
import argparse
import time
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from .adaptive import unsure
from .decode import Result, Step, _prepare, _stop
from .drafters import Drafter
from .model import WEIGHTS_DIR, load_model
from .sampling import probs, sample
from .train import corpus_files, get_batch, load_bytes
from .tree import Tree, TreeStep, keep_path, tree_mask, typical_accept, verify_tree
from .verify import greedy_accept, speculative_accept

MEDUSA_PATH, HYDRA_PATH = WEIGHTS_DIR / "medusa_heads.pt", WEIGHTS_DIR / "hydra_heads.pt"


def _embed(model, idx, pos):
    idx = torch.as_tensor(idx)
    return model.wte(idx.view(-1, idx.shape[-1])) + model.wpe(pos)  # (B, T, C)


def _blocks(model, x, cache, layers, length, mask=None):
    """Blocks `layers` on hidden states x (B, T, C) that follow `length` cached positions."""
    if cache is not None:
        cache.length = length  # the attention layers write the new keys/values from here on
    for i in layers:
        x = model.h[i](x, cache, i, mask)
    return x


def hidden_states(model, idx):
    """idx (B, T) -> the last hidden states ln_f(h_N) (B, T, C), what lm_head and Medusa heads read."""
    x = _embed(model, idx, torch.arange(idx.shape[1]))
    return model.ln_f(_blocks(model, x, None, range(model.config.n_layer), 0))


class EarlyExitDrafter(Drafter):
    """Blocks 1..k + ln_f + head draft. A Drafter for speculative_generate (which re-runs the whole
    target), and with self_speculative_generate it verifies on the same cache (`verify`).
    threshold: stop a round after the first draft whose exit-k confidence (max softmax) is below it,
    as Draft & Verify (Zhang et al. 2024) does; gamma is then the longest round. Still lossless:
    the round's length depends only on the drafts themselves.
    Example: self_speculative_generate(EarlyExitDrafter(load_model("target"), k=2), encode("def "), 16)
    """

    def __init__(self, model, k=2, gamma=4, threshold=None):
        N = model.config.n_layer
        if int(k) != k or not 1 <= k <= N - 1:
            raise ValueError(f"exit layer k must be an integer in 1..n_layer-1 = 1..{N - 1}, got {k}")
        if int(gamma) != gamma or gamma < 1:
            raise ValueError(f"gamma (draft length) must be an integer >= 1, got {gamma}")
        if threshold is not None and not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be in [0, 1] or None, got {threshold}")
        self.model, self.k, self.gamma, self.vocab_size, self.calls = model, int(k), int(gamma), model.config.vocab_size, 0
        self.threshold = threshold
        self.reset()

    def reset(self):
        self.cache = self.model.new_cache()
        self.shallow = self.deep = 0  # positions whose keys/values are valid in blocks < k / blocks >= k
        self.h = []  # h_k (1, T, C) of positions deep..shallow-1: waiting for blocks k..N-1

    def _shallow(self, seq):  # blocks < k on the tokens not seen yet -> their h_k (1, T, C), kept
        x = _embed(self.model, seq[self.shallow:], torch.arange(self.shallow, len(seq)))
        self.h.append(_blocks(self.model, x, self.cache, range(self.k), self.shallow))
        self.shallow = len(seq)
        return self.h[-1]

    @torch.inference_mode()
    def propose(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None):
        seq, qs = list(context), []
        for _ in range(gamma):
            logits = self.model.lm_head(self.model.ln_f(self._shallow(seq)[0, -1]))  # (V,)
            q = probs(logits, temperature, top_k, top_p)
            self.calls += 1
            seq.append(sample(q, generator) if temperature > 0 else int(q.argmax()))
            qs.append(q)
            if unsure(logits, self.threshold):
                break  # verify now (the unsure draft itself may well be right)
        return seq[len(context):], torch.stack(qs) if qs else torch.zeros(0, self.vocab_size)

    @torch.inference_mode()
    def verify(self, seq):
        """Full-model logits (T, V) at positions deep..len(seq)-1. Blocks < k run only on tokens never
        fed (the last draft); blocks >= k run on the stored h_k, their cache entries reused as they are."""
        if len(seq) > self.shallow:
            self._shallow(seq)
        x = _blocks(self.model, torch.cat(self.h, 1), self.cache, range(self.k, self.model.config.n_layer), self.deep)
        self.deep, self.h = len(seq), []
        return self.model.lm_head(self.model.ln_f(x))[0]

    def rollback(self, n):
        n = min(n, self.shallow)
        self.h = [torch.cat(self.h, 1)[:, :n - self.deep]] if self.h and n > self.deep else []
        self.shallow, self.deep = n, min(self.deep, n)

    def step(self, context, budget, temperature, top_k, top_p, g):
        """One self-speculative round: draft, verify with the shared cache, accept (lossless)."""
        drafted, q = self.propose(context, min(self.gamma, budget), temperature, top_k, top_p, g)
        p = probs(self.verify(context + drafted)[-len(drafted) - 1:], temperature, top_k, top_p)  # (n + 1, V)
        n, tok = greedy_accept(drafted, p) if temperature == 0 else speculative_accept(drafted, q, p, g)
        self.rollback(len(context) + n)
        return Step(drafted, n, tok)


class MedusaHeads(nn.Module):
    """Head i: logits_i = lm_head(h_t + SiLU(W_i h_t + b_i)) guesses token t + 2 + i; W_i = 0 at first,
    so an untrained head repeats the target's next-token guess (Medusa-1's init).
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
        e = F.embedding(torch.as_tensor(token), self.target[0].wte.weight.detach())  # the target stays frozen
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
    """Self-distillation: head i at t matches the target's own p at t + 1 + i (the next-next token)."""
    with torch.no_grad():
        h = hidden_states(model, x)  # (B, T, C)
        p = torch.softmax(model.lm_head(h), -1)  # (B, T, V)
    out = heads.unroll(h, x)
    return sum(-(p[:, 1 + i:] * torch.log_softmax(lg, -1)).sum(-1).mean() for i, lg in enumerate(out)) / len(out)


@torch.no_grad()
def head_accuracy(model, heads, data, top=4, block_size=256, max_windows=16):
    """accuracy[i][r]: fraction of positions where head i's rank-r guess is the target's argmax at t + 2 + i
    (sequential heads read the true tokens before their guess). data: a byte tensor, read in windows,
    or a list of token sequences, e.g. prompts + their greedy continuations (the regime heads are used in)."""
    hits, total = torch.zeros(len(heads.res), top), torch.zeros(len(heads.res), 1)
    windows = ([torch.as_tensor(seq) for seq in data] if isinstance(data, list) else
               [data[w * block_size:(w + 1) * block_size] for w in range(min(max_windows, (len(data) - 1) // block_size))])
    for x in windows:
        h = hidden_states(model, x[None])
        best = model.lm_head(h)[0].argmax(-1)  # (T,)
        for i, lg in enumerate(heads.unroll(h, x[None])):
            hits[i] += (lg[0].topk(top, -1).indices == best[1 + i:, None]).float().sum(0)
            total[i] += lg.shape[1]
    return (hits / total).tolist()


def train_medusa(model, n_heads=4, steps=300, batch_size=8, block_size=128, lr=3e-3, seed=0, log_every=50,
                 data=None, held=None, sequential=False):
    """Medusa-1 (or Hydra: sequential=True) heads trained on the frozen target (data, held: byte tensors;
    default the corpus).
    Example: train_medusa(load_model("target"), steps=20).accuracy"""
    if data is None or held is None:
        data, held = (load_bytes(files) for files in corpus_files())
    heads, g = MedusaHeads(model, n_heads, sequential), torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, weight_decay=0.0)
    for step in range(1, steps + 1):
        loss = medusa_loss(model, heads, get_batch(data, batch_size, block_size, g)[0])
        opt.zero_grad(set_to_none=True), loss.backward(), opt.step()
        if log_every and (step % log_every == 0 or step == steps):
            print(f"step {step}/{steps}  loss {loss.item():.3f}", flush=True)
    heads.accuracy = head_accuracy(model, heads, held)
    return heads


def save_medusa(heads, path=MEDUSA_PATH, **card):
    state = {k: v.half() for k, v in heads.state_dict().items()}  # fp16 on disk, like the models
    torch.save(dict(n_heads=len(heads.res), sequential=heads.sequential, state_dict=state, accuracy=heads.accuracy,
                    card=card), path)


def load_medusa(model, path=MEDUSA_PATH):
    """The shipped heads on top of `model` (path=HYDRA_PATH: the sequential ones).
    Example: load_medusa(load_model("target")).accuracy"""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    heads = MedusaHeads(model, ckpt["n_heads"], ckpt.get("sequential", False))
    heads.load_state_dict({k: v.float() for k, v in ckpt["state_dict"].items()})
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


def _tree(paths, room):
    """Token paths -> their prefix Tree (at most `room` nodes); cands[node]: the node's children."""
    tree = Tree()
    for path in paths:
        node = -1
        for t in path:
            if len(tree.tokens) == room and t not in tree.children(node):
                break
            node = tree.add(node, t)
    tree.cands = {n: list(tree.children(n)) for n in range(-1, len(tree.tokens))}
    tree.q = dict.fromkeys(tree.cands)  # no q: the guesses are deterministic
    return tree


sample_rule = lambda cands, q, p, generator: sample(p, generator)  # lossless for deterministic guesses


def _tree_step(self, context, tree, temperature, top_k, top_p, g, rule=sample_rule):
    """Score the uncached context + a token tree in one target call, walk it, keep the accepted path."""
    model, cache, n = self.model, self.cache, len(context)
    prefix = context[cache.length:]
    x = _embed(model, prefix + tree.tokens, torch.cat([torch.arange(n - len(prefix), n), n - 1 + tree.depths()]))
    mask = tree_mask(tree.parents, n, len(prefix)) if tree.tokens else None
    h = model.ln_f(_blocks(model, x, cache, range(model.config.n_layer), cache.length, mask))[0, len(prefix) - 1:]
    cache.length = n + len(tree.tokens)
    self.p = probs(model.lm_head(h), temperature, top_k, top_p)  # (1 + N, V): root, then each node
    path, tok = verify_tree(tree, self.p, temperature, rule, g)
    keep_path(cache, n, path)
    self.h = h[path[-1] + 1 if path else 0]  # the hidden state that predicted tok: Medusa's next input
    node, rest = (path[-1] if path else -1), []
    while tree.cands.get(node):  # for the record: continue down the first child
        node = tree.children(node)[tree.cands[node][0]]
        rest.append(tree.tokens[node])
    return TreeStep([tree.tokens[i] for i in path] + rest, len(path), tok, [], tree, path)


class MedusaDrafter:
    """The heads' ranked guesses on a static tree: rank paths like [(0,), (1,), (0, 0)] (default
    medusa_tree(heads.accuracy)). typical=(eps, delta): lossy typical acceptance when sampling."""

    def __init__(self, model, heads, tree=None, typical=None):
        self.model, self.heads = model, heads
        self.tree = tree or medusa_tree(heads.accuracy or [[1.0]] * len(heads.res))
        if not self.tree or max(map(len, self.tree)) > len(heads.res):
            raise ValueError(f"tree must be a non-empty list of rank paths no longer than n_heads={len(heads.res)}")
        self.rule = partial(typical_accept, eps=typical[0], delta=typical[1]) if typical else sample_rule
        self.reset()

    def reset(self):
        self.cache, self.h = self.model.new_cache(), None

    def step(self, context, budget, temperature, top_k, top_p, g):
        tree = Tree()
        if self.h is not None and budget > 0:  # the heads read the hidden state that predicted context[-1]
            tree = _tree(self._guesses(context[-1], budget), self.model.config.block_size - len(context))
        return _tree_step(self, context, tree, temperature, top_k, top_p, g, self.rule)

    def _guesses(self, last, budget):
        """The token path of every rank path in self.tree (at most `budget` long)."""
        R = 1 + max(max(r) for r in self.tree)
        if not self.heads.sequential:  # one look at h: head d's rank-r guess, whatever came before
            top = self.heads(self.h).topk(R, -1).indices.tolist()  # (K, R)
            return [[top[d][r] for d, r in enumerate(ranks)][:budget] for ranks in self.tree]
        prefixes = sorted({ranks[:d] for ranks in self.tree for d in range(min(len(ranks), budget))}, key=len)
        state, tokens = {(): (self.h, last)}, {(): []}  # rank prefix -> (z, its last token), its token path
        for d in range(min(budget, max(map(len, self.tree)))):  # one batched head call per depth
            level = [pre for pre in prefixes if len(pre) == d]
            z = self.heads.advance(torch.stack([state[pre][0] for pre in level]), d,
                                   torch.tensor([state[pre][1] for pre in level]))
            top = self.heads.logits(z).topk(R, -1).indices.tolist()  # (len(level), R)
            for j, pre in enumerate(level):
                for r in range(R):
                    tokens[pre + (r,)] = tokens[pre] + [top[j][r]]
                    state[pre + (r,)] = (z[j], top[j][r])
        return [tokens[ranks[:budget]] for ranks in self.tree]


class Lookahead:
    """Jacobi (candidates=0) and lookahead decoding: score the last token + W guesses (+ up to
    `candidates` pooled n-grams that start with it); the target's outputs, shifted past what was
    accepted, are the next guesses. Example: self_speculative_generate(Lookahead(target), ids, 32)
    """

    def __init__(self, model, window=4, ngram=3, candidates=3):
        for name, v, lo in (("window", window, 1), ("ngram", ngram, 2), ("candidates", candidates, 0)):
            if int(v) != v or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v}")
        self.model, self.window, self.ngram, self.candidates = model, int(window), int(ngram), int(candidates)
        self.reset()

    def reset(self):
        self.cache, self.guess, self.pool, self.hist = self.model.new_cache(), [], {}, []

    def step(self, context, budget, temperature, top_k, top_p, g):
        W = min(self.window, budget)
        guess = (self.guess + [context[-1]] * W)[:W]
        grams = self.pool.get(context[-1], [])[-self.candidates:] if self.candidates and W else []
        tree = _tree([guess] + [list(c)[:budget] for c in grams], self.model.config.block_size - len(context))
        step = _tree_step(self, context, tree, temperature, top_k, top_p, g)
        out = self.p[:W + 1].argmax(-1).tolist()  # out[j]: the target's token after window node j (0: root)
        self._harvest(len(context) - 1, [context[-1]] + guess, out)
        self.guess = out[step.accepted + 1:]
        return step

    def _harvest(self, start, inputs, out):
        """n-grams along the Jacobi trajectory: the inputs at P-n+2..P-1 in the previous n-2 rounds,
        this round's input at P and the target's output after it (lookahead decoding's diagonals)."""
        n, cur = self.ngram, {start + j: t for j, t in enumerate(inputs)}
        for P, t in cur.items() if len(self.hist) >= n - 2 else ():
            gram = [self.hist[i - (n - 2)].get(P - (n - 2) + i) for i in range(n - 2)] + [t, out[P - start]]
            if None not in gram:
                pool = self.pool.setdefault(gram[0], [])
                pool.remove(tuple(gram[1:])) if tuple(gram[1:]) in pool else None
                pool.append(tuple(gram[1:]))
        self.hist = (self.hist + [cur])[-(n - 2):] if n > 2 else []


@torch.inference_mode()
def self_speculative_generate(method, ids, max_new_tokens=64, temperature=0.0, top_k=None, top_p=None, seed=0,
                              eos_token=None, crop_prompt=False):
    """Decode with an EarlyExitDrafter, MedusaDrafter or Lookahead, one target call a round; greedy:
    exactly generate(method.model, ...). Example: self_speculative_generate(Lookahead(target), ids, 32)"""
    ids = _prepare(method.model, ids, max_new_tokens, temperature, top_k, top_p, crop_prompt)
    g = torch.Generator().manual_seed(seed)
    method.reset()
    context, steps, t0, calls0 = list(ids), [], time.perf_counter(), getattr(method, "calls", 0)
    while len(context) - len(ids) < max_new_tokens and (eos_token is None or eos_token not in context[len(ids):]):
        s = method.step(context, max_new_tokens - (len(context) - len(ids)) - 1, temperature, top_k, top_p, g)
        context += s.drafted[:s.accepted] + [s.token]
        steps.append(s)
    wall = time.perf_counter() - t0
    tokens = _stop(context[len(ids):], max_new_tokens, eos_token)
    drafted = sum(len(s.tree.tokens) if isinstance(s, TreeStep) else len(s.drafted) for s in steps)
    stats = dict(acceptance_rate=sum(s.accepted for s in steps) / drafted if drafted else 0.0,
                 tokens_per_call=len(tokens) / len(steps), target_calls=len(steps), drafted=drafted,
                 draft_calls=getattr(method, "calls", 0) - calls0,
                 wall_time=wall, tokens_per_second=len(tokens) / wall)
    return Result(tokens, steps, stats)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m minispec.selfspec train-medusa",
                                 description="Train Medusa heads on the frozen target (the shipped medusa_heads.pt; "
                                             "with --sequential, the Hydra heads hydra_heads.pt).")
    ap.add_argument("cmd", choices=["train-medusa"])
    ap.add_argument("--target", default="target", help="shipped model name or path to a .pt file")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--sequential", action="store_true", help="Hydra heads: each reads the token before its guess")
    ap.add_argument("--out", default=None)
    args, t0 = ap.parse_args(argv), time.time()
    out = args.out or str(HYDRA_PATH if args.sequential else MEDUSA_PATH)
    heads = train_medusa(load_model(args.target), args.heads, args.steps, args.batch_size, sequential=args.sequential)
    print("held-out top-1 accuracy per head:", " ".join(f"{a[0]:.3f}" for a in heads.accuracy))
    cmd = f"python -m minispec.selfspec train-medusa --heads {args.heads} --steps {args.steps} --batch-size {args.batch_size}"
    save_medusa(heads, out, command=cmd + " --sequential" * args.sequential, train_seconds=round(time.time() - t0))
    print(f"saved {out} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
