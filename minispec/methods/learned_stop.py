"""A learned stop: SpecDec++ (Huang et al. 2024; survey section 2.1.2, a head that predicts
acceptance and decides when to stop drafting).

After drafting x_i, a small acceptance head predicts the chance that the target keeps it, given
that it keeps x_1..x_{i-1}:

    a_i = sigmoid(w_T . f_i + b_T),    f_i = [max_x q~_i(x), H(q~_i), q~_i(x_i)],

where q~_i is the draft's softmax at temperature 1 (its raw confidence: at temperature 0 the q
the token is drawn from is one-hot and says nothing) and (w_T, b_T) is one of two weight rows, for
greedy (T = 0) and sampled (T > 0) decoding. prod_{j<=i} a_j is then the predicted chance that
the whole chain so far is kept, and SpecDec++'s stopping rule ends the round once the predicted
chance that SOME drafted token of it is rejected passes a threshold h:

    stop after x_i  if  1 - prod_{j<=i} a_j > h      (or once gamma tokens are drafted).

The head is a logistic regression on 3 features (8 numbers), fitted on rounds of the shipped
pair by scripts/train_learned_stop.py and shipped as minispec/weights/learned_stop.pt.
"""
import numbers
from pathlib import Path

import torch
import torch.nn as nn

from ..drafters import ModelDrafter, pick
from ..model import WEIGHTS_DIR
from ..sampling import whole
from ..tree import Tree
from .args import draft_args
from .heads import read

FEATURES = ("max_prob", "entropy", "token_prob")  # f_i, in this order


def stop_features(logits, token):
    """The draft's logits (V,) at a step and the token it drafted -> f (3,): its max softmax
    probability, the softmax's entropy (nats) and the drafted token's probability, at T = 1."""
    token = check_step(logits, token)  # else a ValueError
    logp = torch.log_softmax(logits.detach().float(), -1)  # (V,) on the logits' device, as the head
    p = logp.exp()
    entropy = -(p * logp).sum()
    return torch.stack([p.max(), entropy, p[token]])


def check_step(logits, token):
    """stop_features' arguments -> the token as an int in [0, V), or a ValueError naming the bad one
    (-1 read the last token's probability)."""
    if not (torch.is_tensor(logits) and logits.dim() == 1):
        got = tuple(logits.shape) if torch.is_tensor(logits) else type(logits).__name__
        raise ValueError(f"logits must be the draft's logits at one step, a (V,) tensor, got {got}")
    return whole(token, "token (the drafted token's id)", 0, len(logits))


def head_rows(sampled):
    """AcceptanceHead's `sampled` (a bool, numpy's too, or a tensor of bools) -> the weight rows it
    reads (0: greedy, 1: sampled), as a long tensor; anything else (2, None) -> a ValueError."""
    try:
        row = torch.as_tensor(sampled)
    except (RuntimeError, TypeError, ValueError):  # None, a string
        row = None
    if row is None or row.dtype != torch.bool:
        raise ValueError(f"sampled must be a bool (temperature > 0) or a tensor of bools, got "
                         f"{sampled!r}")
    return row.long()


class AcceptanceHead(nn.Module):
    """a = sigmoid(w_T . f + b_T): the predicted chance that a drafted token is kept. Row 0 of
    weight / bias is for greedy decoding (T = 0), row 1 for sampling (T > 0).
    Example: AcceptanceHead()(stop_features(logits, token), sampled=False) -> a tensor in (0, 1)"""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(2, len(FEATURES)))
        self.bias = nn.Parameter(torch.zeros(2))

    def forward(self, f, sampled):
        """f (..., 3) -> a (...); sampled: temperature > 0 (a bool, or a (...) bool tensor)."""
        row = head_rows(sampled)  # else a ValueError
        return torch.sigmoid((f * self.weight[row]).sum(-1) + self.bias[row])


def load_stop_head(path=None):
    """The shipped acceptance head (path None), or the one a file holds (a str or a Path, as
    scripts/train_learned_stop.py saves it), fp16 on disk, float32 here."""
    if not (path is None or isinstance(path, (str, Path))):  # Path(123) is a TypeError
        raise ValueError(f"path must be a saved head's file (a str or a Path), or None for the "
                         f"shipped head, got {path!r}")
    path = Path(path or WEIGHTS_DIR / "learned_stop.pt")
    if not path.exists():
        raise ValueError(f"no acceptance head at {path}: give a saved file's path, or None for "
                         "the shipped head")
    ckpt = read(path)
    features = tuple(ckpt.get("features", ()))  # () in another method's file
    if features != FEATURES:
        raise ValueError(f"{path} was fitted on features {features}, not {FEATURES}")
    head = AcceptanceHead()
    own, state = head.state_dict(), ckpt.get("state_dict")
    if not (isinstance(state, dict) and set(state) == set(own) and all(
            torch.is_tensor(v) and v.shape == own[k].shape for k, v in state.items())):
        want = ", ".join(f"{k} {tuple(v.shape)}" for k, v in own.items())
        raise ValueError(f"{path} does not hold an AcceptanceHead's state_dict ({want})")
    head.load_state_dict({k: v.float() for k, v in state.items()})
    return head.requires_grad_(False).eval()


class LearnedStopDrafter(ModelDrafter):
    """A model drafter's chain that ends with SpecDec++'s stop: after the first token at which
    1 - prod_j a_j > threshold (that token is still proposed), or at gamma tokens. threshold 1
    never stops early (a fixed gamma); threshold 0 stops after the first token unless the head
    is sure (a = 1). head: an AcceptanceHead (None: the shipped one, fitted on the shipped pair).
    Example: speculative_generate(target, LearnedStopDrafter(draft, threshold=0.6), ids, gamma=8)
    """

    def __init__(self, model, head=None, threshold=0.5):
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
            raise ValueError(f"threshold must be a number in [0, 1], got {threshold!r}")
        if not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be in [0, 1] (a chance of a rejection), got "
                             f"{threshold}")
        if head is not None and not isinstance(head, AcceptanceHead):
            raise ValueError(f"head must be an AcceptanceHead or None, got {type(head).__name__}")
        super().__init__(model)
        self.head = (load_stop_head() if head is None else head).to(model.wte.weight)  # its dtype
        self.threshold = threshold

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        context, gamma = draft_args(context, gamma, depth, root=True)  # 2.5, None, []: named
        super().draft(context, 0)  # ModelDrafter's bookkeeping: keep the cached shared prefix
        tokens, qs, all_kept = [], [], 1.0
        new = context[self.cache.length:]  # catch up on the context, then one token a step
        while len(tokens) < gamma:
            idx = torch.tensor([new], device=self.model.wte.weight.device)
            logits = self.model(idx, self.cache)[0, -1]  # (V,)
            self.calls += 1
            token, q = pick(logits, temperature, top_k, top_p, generator)
            tokens.append(token)
            qs.append(q)
            all_kept *= float(self.head(stop_features(logits, token), temperature > 0))
            # Lossless: the stop reads only the draft's logits and tokens, never the target's
            # verdict, so each emitted token is still a verified draft or a draw from p.
            if 1 - all_kept > self.threshold:
                break
            new = [token]
        self.cached += tokens  # the cache holds context + tokens[:-1]
        return Tree.chain(tokens, qs)
