"""Early exit (survey section 2.1.2, dependent drafters): the target's first k blocks draft.

LayerSkip (Elhoushi et al. 2024): blocks 1..k + the shared ln_f and head draft,
q = softmax(head(ln_f(h_k))), on the loop's ONE KV cache; `score` reuses the drafts' entries in
blocks 1..k and their h_k, and runs only blocks k+1..N: nothing is computed twice. The target is
trained with an early-exit loss so that exit k is a usable model (scripts/train.py).
"""
import numbers

import torch

from ..drafters import Drafter, pick, unsure
from ..sampling import whole
from ..tree import Tree
from .args import check_model, common_prefix, draft_args


def check_threshold(threshold):
    """The confidence stop's threshold: None, or a number in [0, 1]; else a ValueError."""
    number = isinstance(threshold, numbers.Real) and not isinstance(threshold, bool)
    if threshold is not None and not (number and 0 <= threshold <= 1):
        raise ValueError(f"threshold must be a number in [0, 1] or None, got {threshold!r}")


class EarlyExitDrafter(Drafter):
    """Draft with the target's first k blocks. threshold: end a round after the first draft whose
    exit-k max softmax is below it (the confidence stop of Draft & Verify, Zhang et al. 2024, who
    skip intermediate layers rather than exit early).
    Example: speculative_generate(target, EarlyExitDrafter(target, k=2), encode("def "), 16)
    """

    def __init__(self, model, k=2, threshold=None):
        N = check_model(model).config.n_layer
        if whole(k, "exit layer k") > N - 1:
            raise ValueError(f"exit layer k must be an integer in 1..n_layer-1 (n_layer={N}: the "
                             f"exit needs a layer above it to skip), got {k}")
        check_threshold(threshold)
        self.model = model
        self.k = int(k)
        self.threshold = threshold
        self.vocab_size = model.config.vocab_size
        self.reset(model, model.new_cache())

    def reset(self, target, cache):
        if target is not self.model:
            raise ValueError("an EarlyExitDrafter drafts for the model it was built on: pass that "
                             "model as the target (a reloaded model is another: build it again)")
        self.cache = cache  # the target's: blocks < k hold `shallow` entries, blocks >= k `deep`
        self.shallow = 0
        self.deep = 0
        self.h = []  # h_k (1, T, C) of positions deep..shallow-1: waiting for blocks k..N-1
        self.seen = []  # the tokens fed to blocks < k, in order (the first `shallow` are cached)

    @property
    def first(self):
        """The first block the draft does not run as the full model does: k here (layer skipping,
        methods/layer_skip.py, shares this shared-cache bookkeeping with s = min(S))."""
        return self.k

    def _shallow(self, seq):
        """Blocks < first on the tokens they have not seen -> their h (1, T, C), kept for score."""
        dev = self.model.wte.weight.device
        pos = torch.arange(self.shallow, len(seq), device=dev)
        x = self.model.embed(torch.tensor([seq[self.shallow:]], device=dev), pos)
        self.h.append(self.model.blocks(x, self.cache, range(self.first), start=self.shallow))
        self.shallow = len(seq)
        self.seen = list(seq)
        return self.h[-1]

    def args(self, context, gamma, depth):
        """draft's arguments checked (args.draft_args) -> (context as a list, tokens to draft).
        A context that does not extend what the cache holds (a direct call; the loop's always do)
        backs the cache up to where the two part, so a draft never reads another text's keys."""
        seq, gamma = draft_args(context, gamma, depth, root=True)
        same = min(common_prefix(self.seen, seq), len(seq) - 1)  # the last token: fed to draft
        if same < self.shallow:
            self.shallow = self.deep = min(same, self.deep)
            self.h = []
        return seq, gamma

    @torch.inference_mode()
    def draft(self, context, gamma, temperature=0.0, top_k=None, top_p=None, generator=None,
              depth=None):
        seq, gamma = self.args(context, gamma, depth)
        qs = []
        for _ in range(gamma):
            logits = self.model.lm_head(self.model.ln_f(self._shallow(seq)[0, -1]))  # (V,)
            self.calls += 1
            token, q = pick(logits, temperature, top_k, top_p, generator)
            seq.append(token)
            qs.append(q)
            if unsure(logits, self.threshold):
                break  # verify now (the unsure draft itself may well be right)
        return Tree.chain(seq[len(seq) - len(qs):], qs)

    @torch.inference_mode()
    def score(self, target, cache, context, tree):
        seq = context + tree.tokens
        self._shallow(seq)  # blocks < k on the one token never fed: the last draft (or context's)
        deep = range(self.first, self.model.config.n_layer)  # every block after: the full model
        h = self.model.blocks(torch.cat(self.h, 1), self.cache, deep, start=self.deep)
        h = self.model.ln_f(h)
        self.deep = len(seq)
        self.h = []
        return h[0], self.model.lm_head(h[0])

    def accept(self, context, tree, path, hidden, logits):
        self.seen = list(context) + [tree.tokens[i] for i in path]  # another drafter's round too
        self.shallow = self.deep = len(self.seen)  # the loop kept the cache to there
