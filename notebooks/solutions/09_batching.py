"""Notebook 09, exercise "the test that catches batching bugs": a reference solution and wrong
answers (each a weak test that a batching bug slips through)."""


def first_wrong(tokens, reference):
    """The index of the first new token where two continuations differ; None if they are equal."""
    for i, (a, b) in enumerate(zip(tokens, reference)):
        if a != b:
            return i
    return None if len(tokens) == len(reference) else min(len(tokens), len(reference))


def solution(decode_batch, prompts, n):
    """Every row against the same prompt decoded on its own (a batch of one)."""
    outs = decode_batch(prompts, n)
    return [first_wrong(o.tokens, decode_batch([p], n)[0].tokens) for o, p in zip(outs, prompts)]


def wrong(decode_batch, prompts, n):
    """Wrong: the batch against the batch decoded again. That tests determinism, not correctness: a
    bug that breaks rows breaks them the same way twice."""
    outs, again = decode_batch(prompts, n), decode_batch(prompts, n)
    return [first_wrong(o.tokens, a.tokens) for o, a in zip(outs, again)]


def only_longest(decode_batch, prompts, n):
    """Wrong: only the longest prompt's row is compared (the row both classic bugs leave right)."""
    outs = decode_batch(prompts, n)
    longest = max(range(len(prompts)), key=lambda b: len(prompts[b]))
    result = [None] * len(prompts)
    alone = decode_batch([prompts[longest]], n)[0].tokens
    result[longest] = first_wrong(outs[longest].tokens, alone)
    return result


def zipped(decode_batch, prompts, n):
    """Wrong: compares position by position with zip, which stops at the shorter continuation, so a
    row that lost its last tokens looks right."""
    outs = decode_batch(prompts, n)
    result = []
    for o, p in zip(outs, prompts):
        alone = decode_batch([p], n)[0].tokens
        diffs = [i for i, (a, b) in enumerate(zip(o.tokens, alone)) if a != b]
        result.append(diffs[0] if diffs else None)
    return result


def last_difference(decode_batch, prompts, n):
    """Wrong: the loop records every position that differs and keeps the last (no break)."""
    outs = decode_batch(prompts, n)
    result = []
    for o, p in zip(outs, prompts):
        alone, found = decode_batch([p], n)[0].tokens, None
        for i, (a, b) in enumerate(zip(o.tokens, alone)):
            if a != b:
                found = i
        short = len(o.tokens) != len(alone)
        result.append(min(len(o.tokens), len(alone)) if found is None and short else found)
    return result


def length_first(decode_batch, prompts, n):
    """Wrong: a row of another length is reported at the shorter length before any token is
    compared, so a row wrong early and also short is reported late."""
    outs = decode_batch(prompts, n)
    result = []
    for o, p in zip(outs, prompts):
        alone = decode_batch([p], n)[0].tokens
        if len(o.tokens) != len(alone):
            result.append(min(len(o.tokens), len(alone)))
        else:
            result.append(first_wrong(o.tokens, alone))
    return result


def batched_length(decode_batch, prompts, n):
    """Wrong: where one row is a prefix of the other it reports the batched row's length, right
    only when the batched row is the shorter one (a finished row that kept decoding is not)."""
    outs = decode_batch(prompts, n)
    result = []
    for o, p in zip(outs, prompts):
        alone = decode_batch([p], n)[0].tokens
        found = first_wrong(o.tokens, alone)
        short = found is not None and found == min(len(o.tokens), len(alone))
        result.append(len(o.tokens) if short and o.tokens[:found] == alone[:found] else found)
    return result


# the check rejects these too (tests/test_exercises.py)
def truthy_index(decode_batch, prompts, n):
    """Wrong: `i if i else ...` reads a difference at new token 0 as none (found by a red team)."""
    outs, result = decode_batch(prompts, n), []
    for o, p in zip(outs, prompts):
        alone = decode_batch([p], n)[0].tokens
        i = next((i for i, (a, b) in enumerate(zip(o.tokens, alone)) if a != b), None)
        end = min(len(o.tokens), len(alone)) if len(o.tokens) != len(alone) else None
        result.append(i if i else end)
    return result


more_wrong = [only_longest, zipped, last_difference, length_first, batched_length, truthy_index]
