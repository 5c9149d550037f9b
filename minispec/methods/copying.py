"""What the copying drafters (edit lookup, lookup with a cursor, as a tree, with its length set by
its match) check when their `draft` is called directly: the loop passes a list and whole numbers, a
reader may pass a tensor, 2.0, None or a batch."""
from ..sampling import whole


def draft_args(context, gamma, depth=None):
    """-> (the context as a list of token ids, min(gamma, depth) as an int), else a ValueError.
    Example: draft_args(torch.tensor([5, 6, 5]), 3.0, depth=2) == ([5, 6, 5], 2)"""
    if context is None or isinstance(context, (str, bytes)) or getattr(context, "ndim", 1) != 1:
        raise ValueError(f"context must be one sequence of token ids, got {context!r:.80}")
    gamma = whole(gamma, "gamma (tokens to draft)", 0)
    if depth is not None:
        gamma = min(gamma, whole(depth, "depth (None: any)", 0))
    return (context.tolist() if hasattr(context, "tolist") else list(context)), gamma
