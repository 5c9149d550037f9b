"""What the two loops share (speculate.py's for one prompt, minispec.batch.loop's for a list): the
records of a round (Step) and of a decode (Stats, Result), the checks of their arguments, and when
to stop. Both loops import it; it imports neither."""
import numbers
import time
from dataclasses import dataclass

from .sampling import check_sampling_args, whole
from .tree import Tree


@dataclass
class Step:
    """One target call: the drafted tree, the path of it the target kept, and the token it added."""
    tree: Tree
    path: list   # kept node indices, the root's child first
    token: int   # the target's own token after them

    @property
    def accepted(self):  # drafted tokens kept
        return len(self.path)

    @property
    def bonus(self):  # the kept path reached a leaf of a real draft: the added token is extra
        return bool(self.tree.tokens) and not self.tree.children(self.path[-1] if self.path else -1)


@dataclass
class Stats:
    tokens_per_call: float    # new tokens per target call (the survey's efficiency measure)
    kept_fraction: float      # drafted tokens kept / drafted tokens (tree nodes count)
    target_calls: int
    draft_calls: int          # the drafter's forward passes
    drafted: int              # drafted tokens (tree nodes) the target scored
    wall_time: float          # seconds
    tokens_per_second: float


@dataclass
class Result:
    tokens: list   # the new tokens only
    steps: list    # one Step per target call (empty for plain generate)
    stats: Stats


def finish(prompt, context, steps, max_new_tokens, eos_token, t0, draft_calls=0):
    """Cut the new tokens at max_new_tokens and right after the first eos_token; the stats."""
    tokens = context[len(prompt):][:max_new_tokens]
    if eos_token is not None and eos_token in tokens:
        tokens = tokens[:tokens.index(eos_token) + 1]
    if steps and (cut := len(context) - len(prompt) - len(tokens)):  # the eos was a kept draft:
        steps[-1] = Step(steps[-1].tree, steps[-1].path[:-cut], tokens[-1])  # the round ends at it
    wall, calls = time.perf_counter() - t0, len(steps) or len(tokens)
    drafted = sum(len(s.tree.tokens) for s in steps)
    kept = sum(s.accepted for s in steps) / drafted if drafted else 0.0
    stats = Stats(len(tokens) / calls, kept, calls, draft_calls, drafted, wall, len(tokens) / wall)
    return Result(tokens, steps, stats)


def tokens_left(prompt, context, max_new_tokens, eos_token):
    """How many more tokens are wanted: 0 once there are max_new_tokens new ones or eos_token."""
    return 0 if eos_token in context[len(prompt):] else max_new_tokens + len(prompt) - len(context)


def check_args(model, max_new_tokens, temperature, top_k, top_p, eos_token, seed):
    """The decoding options -> max_new_tokens as an int, or a ValueError naming the bad one."""
    if not hasattr(model, "new_cache"):  # None; a Drafter: speculate's arguments swapped?
        raise ValueError(f"the target must be a model (a GPT, a Llama), got a "
                         f"{type(model).__name__}: speculative_generate(target, drafter, ids, ...)")
    whole(seed, "seed", -2**63, 2**64)  # the integers torch's manual_seed takes
    check_sampling_args(temperature, top_k, top_p)
    if eos_token is not None:  # a token the model can emit
        whole(eos_token, "eos_token (or None)", 0, model.config.vocab_size)
    room = f"max_new_tokens (block_size={model.config.block_size} holds the prompt and them)"
    return whole(max_new_tokens, room, 1, model.config.block_size)


def check_prompt(model, ids, max_new_tokens, crop_prompt):
    """One prompt -> a list of ints (its end only, if crop_prompt and too long)."""
    V, block = model.config.vocab_size, model.config.block_size
    if ids is None or isinstance(ids, (numbers.Number, set, dict)):  # no order: no prompt
        raise ValueError(f"ids must be a list of token ids, got {ids!r}")
    ids = ids.flatten().tolist() if getattr(ids, "ndim", 3) < 3 else list(ids)  # numpy's too
    if any(isinstance(i, str) for i in ids):  # text, or a batch of texts
        raise ValueError("ids must be token ids, not text: minispec.encode(text) (a batch: each)")
    p = [whole(i, "each token id", 0, V) for i in ids]  # None, 2.5, nan, inf, -1, V: no
    if not p:
        raise ValueError("the prompt is empty: give at least one token id")
    if len(p) + max_new_tokens > block and not crop_prompt:
        raise ValueError(f"prompt ({len(p)} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"block_size={block}; shorten it or pass crop_prompt=True to keep its end")
    return p[max(len(p) + max_new_tokens - block, 0):]  # crop_prompt: keep the end that fits
