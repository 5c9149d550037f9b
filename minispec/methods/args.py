"""What a drafter checks: its model, and its `draft`'s arguments when it is called directly (the
loop passes a list and whole numbers, a reader may pass a tensor, 2.0, None or a batch)."""
from ..sampling import whole


def check_model(model):
    """model, if it is a model (a GPT or a Llama: it has new_cache); else a ValueError."""
    if not hasattr(model, "new_cache"):  # None; a name ("target") not loaded yet
        raise ValueError(f"model must be a GPT or a Llama, got a {type(model).__name__}")
    return model


def draft_args(context, gamma, depth=None, root=False, vocab=None):
    """-> (the context as a list of token ids, min(gamma, depth) as an int), else a ValueError
    naming the argument (a token id 2.5 or -1 too, or one >= vocab where given: a drafter that
    guesses context tokens without its model; with root, an empty context: a drafter that reads
    the last token, the root its draft follows).
    Example: draft_args(torch.tensor([5, 6, 5]), 3.0, depth=2) == ([5, 6, 5], 2)"""
    if context is None or isinstance(context, (str, bytes)) or getattr(context, "ndim", 1) != 1:
        raise ValueError(f"context must be one sequence of token ids, got {context!r:.80}")
    gamma = whole(gamma, "gamma (tokens to draft)", 0)
    if depth is not None:
        gamma = min(gamma, whole(depth, "depth (None: any)", 0))
    ids = context.tolist() if hasattr(context, "tolist") else list(context)
    if not all(type(t) is int and t >= 0 for t in ids):  # numpy ints, 2.5, -1, None: one by one
        ids = [whole(t, "each context token id", 0) for t in ids]
    if root and not ids:  # the loop's context holds the prompt at least
        raise ValueError("context must hold at least one token: the root the draft follows")
    if vocab is not None and ids and max(ids) >= vocab:
        raise ValueError(f"context token id {max(ids)} is outside the vocabulary [0, {vocab})")
    return ids, gamma


def common_prefix(a, b):
    """How many first tokens two token lists share: what a drafter's cache of `a` keeps for `b`."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def tree_args(context, gamma, depth=None, root=False, vocab=None):
    """A tree's gamma is its nodes, depth its depth -> (the context as a list, gamma as an int,
    depth as an int or None), else a ValueError (root and vocab: as in draft_args)."""
    context, gamma = draft_args(context, gamma, root=root, vocab=vocab)
    return context, gamma, None if depth is None else whole(depth, "depth (None: any)", 0)
