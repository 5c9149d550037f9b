"""Medusa and Hydra heads (survey section 2.1.2, dependent drafters): small heads on the target's
last hidden state guess the tokens after the next one. The guesses are deterministic (no q):
verify.verify_tree says why that is lossless. Training: scripts/train_heads.py.
"""
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..drafters import Drafter
from ..model import WEIGHTS_DIR
from ..sampling import whole
from ..tree import Tree
from .args import check_model, tree_args


class MedusaHeads(nn.Module):
    """Medusa (Cai et al. 2024) head i: logits_i = lm_head(h_t + SiLU(W_i h_t + b_i)) guesses token
    t + 2 + i; W_i = 0 at first, so an untrained head repeats the target's next-token guess.
    sequential=True (Hydra, Ankner et al. 2024): head i also reads the token before its guess,
        z_0 = h_t,  z_{i+1} = z_i + SiLU(W_i [z_i; e(x_{t+1+i})] + b_i),
        logits_i = lm_head(z_{i+1}),
    so each guess is conditioned on the path drafted so far (e: the target's own embedding).
    Example: MedusaHeads(load_model("target"), n_heads=4)(torch.zeros(256)).shape == (4, 256)
    """

    def __init__(self, model, n_heads=4, sequential=False):
        super().__init__()
        if not isinstance(sequential, bool):  # "no" would read as True: Hydra's heads
            raise ValueError(f"sequential must be True or False, got {sequential!r}")
        C, self.sequential = check_model(model).config.n_embd, sequential
        n_in = 2 * C if sequential else C
        self.res = nn.ModuleList(nn.Linear(n_in, C) for _ in range(whole(n_heads, "n_heads")))
        for lin in self.res:
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.target = (model,)  # a tuple: the frozen target is not a submodule (not trained, saved)
        self.accuracy = None  # accuracy[i][r]: how often head i's rank-r guess is the target's

    def logits(self, z):
        return F.linear(z, self.target[0].lm_head.weight.detach())

    def forward(self, h):  # (..., C) -> (..., n_heads, V), Medusa-1 heads only
        if self.sequential:
            raise ValueError("sequential heads need the drafted tokens: use advance()")
        return torch.stack([self.logits(h + F.silu(lin(h))) for lin in self.res], -2)

    def advance(self, z, i, token):
        """Sequential head i: z_i (..., C) and the token x_{t+1+i} (...) -> z_{i+1}."""
        w = self.target[0].wte.weight.detach()  # the target is frozen
        e = F.embedding(torch.as_tensor(token, device=z.device), w)
        return z + F.silu(self.res[i](torch.cat([z, e], -1)))


def load_heads(model, name="medusa"):
    """The shipped heads on `model`: "medusa", "hydra" (sequential), or a saved file's path."""
    check_model(model)  # a name ("target") not loaded yet: a ValueError, not an AttributeError
    if not isinstance(name, (str, Path)):  # Path(None) is a TypeError
        raise ValueError(f"name must be 'medusa', 'hydra' or a file's path, got {name!r}")
    path = WEIGHTS_DIR / f"{name}_heads.pt" if name in ("medusa", "hydra") else Path(name)
    if not path.exists():
        raise ValueError(f"no heads {name!r}: the shipped heads are 'medusa' and 'hydra', or give "
                         "a saved file's path")
    ckpt = read(path)
    if "n_heads" not in ckpt:
        raise ValueError(f"{path.name} holds no Medusa or Hydra heads (another method's file?)")
    heads = MedusaHeads(model, ckpt["n_heads"], ckpt.get("sequential", False)).to(model.wte.weight)
    return fit(heads, ckpt, path)


def read(path, kind="a drafter's"):
    """A drafter's (or kind's) file, a dict that torch.save wrote -> the dict; else a ValueError."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # a file torch.save did not write fails inside torch.load in many ways
        ckpt = None
    if not isinstance(ckpt, dict):
        raise ValueError(f"{path} is not {kind} weights file (a .pt that torch.save wrote)")
    return ckpt


def fit(head, ckpt, path):
    """A trained head's weights (fp16 on disk) copied into `head`, in its target's dtype; a target
    of another shape than the one it was trained for -> ValueError naming a tensor that differs."""
    own = head.state_dict()
    if set(ckpt.get("state_dict", {})) != set(own):
        raise ValueError(f"{Path(path).name} does not hold a {type(head).__name__}'s weights "
                         "(another method's file?)")
    for name, w in ckpt["state_dict"].items():
        if name in own and own[name].shape != w.shape:
            raise ValueError(f"{Path(path).name} was trained for a target of another shape: its "
                             f"{name} is {tuple(w.shape)}, this target's {tuple(own[name].shape)}")
    head.load_state_dict(ckpt["state_dict"])
    head.accuracy = ckpt.get("accuracy")
    return head.eval()


def medusa_tree(accuracy, size=8):
    """Medusa's static tree: the `size` rank paths (r_1, .., r_d) with the largest expected gain
    prod_i accuracy[i][r_i], picked greedily (a prefix never scores lower, so the set is a tree)."""
    if not len(accuracy) or not all(hasattr(row, "__len__") for row in accuracy):  # [0.5, 0.2]
        raise ValueError(f"accuracy must hold one row of rank accuracies per head, got {accuracy}")
    size = whole(size, "size (the tree's nodes)")
    paths, frontier = [], {(r,): a for r, a in enumerate(accuracy[0])}
    while len(paths) < size and frontier:
        best = max(frontier, key=frontier.get)
        value = frontier.pop(best)
        paths.append(best)
        if len(best) < len(accuracy):
            frontier.update({best + (r,): value * a for r, a in enumerate(accuracy[len(best)])})
    return paths


class HeadDrafter(Drafter):
    """Medusa / Hydra heads' ranked guesses on a static tree of rank paths like
    [(0,), (1,), (0, 0)] (default: the gamma paths of medusa_tree(heads.accuracy)); the first round
    has no hidden state yet and drafts nothing. Example: HeadDrafter(load_heads(target, "hydra"))"""

    def __init__(self, heads, tree=None):
        if not isinstance(heads, MedusaHeads):
            raise ValueError(f"heads must be MedusaHeads (load_heads(target, 'medusa' or "
                             f"'hydra')), got {type(heads).__name__}")
        n, V = len(heads.res), heads.target[0].config.vocab_size
        if tree is not None:
            try:  # each path a tuple of whole ranks (a list or an array would not hash)
                tree = [tuple(whole(r, "a rank", 0) for r in p) for p in tree]
            except TypeError:  # a path that is not a sequence, as in tree=[0, 1]
                raise ValueError(f"tree must be a list of rank paths such as [(0,), (1,), "
                                 f"(0, 0)], got {tree!r}") from None
            if not (tree and all(0 < len(p) <= n and max(p) < V for p in tree)):
                raise ValueError(f"tree must be a non-empty list of rank paths, each of 1 to "
                                 f"n_heads={n} ranks below the vocabulary's {V}, got {tree}")
        self.model = heads.target[0]
        self.heads = heads
        self.tree = tree
        self.h = None
        self.seen = None  # the tokens up to the one h predicted after (None: no h yet)

    def reset(self, target, cache):
        if target is not self.model:
            raise ValueError("these heads were built for another model object (a reloaded target "
                             "is another one): build the drafter again on this target")
        self.heads.to(target.wte.weight)  # follow the target's device and dtype (model.double())
        self.h = None
        self.seen = None

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, gamma, depth = tree_args(context, gamma, depth)
        if gamma < 1 or depth == 0 or self.seen != context[:-1]:
            return Tree()  # no hidden state of this context yet (the first round), or no drafts
        accuracy = self.heads.accuracy  # a list, an array or a tensor: medusa_tree takes each
        if accuracy is None or not len(accuracy):
            accuracy = [[1.0]] * len(self.heads.res)
        ranks = [path[:depth] for path in self.tree or medusa_tree(accuracy, gamma)]
        R = 1 + max(max(r) for r in ranks)  # guesses needed per head
        if not self.heads.sequential:  # one look at h: head d's rank-r guess, whatever came before
            self.calls += 1
            top = self.heads(self.h).topk(R, -1).indices.tolist()  # (K, R)
            return Tree.from_paths([[top[d][r] for d, r in enumerate(p)] for p in ranks], gamma)
        z = {(): self.h}  # rank prefix -> the z its children read
        tokens = {(): [context[-1]]}  # rank prefix -> the root token and its path of guesses
        for d in range(max(map(len, ranks))):  # one batched head call per depth
            self.calls += 1
            level = sorted({path[:d] for path in ranks if len(path) > d})
            prev = [tokens[pre][-1] for pre in level]
            zs = self.heads.advance(torch.stack([z[pre] for pre in level]), d, prev)
            top = self.heads.logits(zs).topk(R, -1).indices.tolist()  # (len(level), R)
            for pre, z_next, row in zip(level, zs, top):
                for r, t in enumerate(row):
                    z[pre + (r,)] = z_next
                    tokens[pre + (r,)] = tokens[pre] + [t]
        return Tree.from_paths([tokens[path][1:] for path in ranks], gamma)

    def accept(self, context, tree, path, hidden, logits):
        root = len(hidden) - len(tree.tokens) - 1  # the hidden state that predicted the new token:
        self.h = hidden[root + 1 + path[-1] if path else root]
        self.seen = list(context) + [tree.tokens[i] for i in path]
