"""What every benchmark shares: how a speedup is measured on a noisy machine.

A speedup is a ratio of two decodes of the same prompt in the same process: the autoregressive
baseline and the method. Other work on a shared machine only ever adds time, so each side is timed
as the best of a few runs, and the runs alternate (base, method, base, method, ...) so that a slow
spell hits both. Per-prompt ratios are often bimodal (a prompt that repeats itself is another
regime), so a table reports the median and the spread, never the median alone.
"""
import statistics
import time


def timed(fn):
    """fn() -> (its result, wall seconds)."""
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def paired(base, method, repeats=3):
    """Run base() and method() alternately `repeats` times -> (base's result, method's result,
    base's best time, method's best time); their ratio is the speedup. Both must be deterministic
    (fixed seeds)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    t_base, t_method = [], []
    for _ in range(repeats):
        b, t = timed(base)
        t_base.append(t)
        m, t = timed(method)
        t_method.append(t)
    return b, m, min(t_base), min(t_method)


def spread(ratios):
    """Per-prompt ratios -> "median (min-max)", e.g. "1.41x (1.15-1.85)"."""
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
