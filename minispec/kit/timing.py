"""Timing on this machine, one way everywhere (notebooks, demo, benchmarks).

A speedup is a ratio of two decodes of the same work in the same process: the autoregressive
baseline and the method. Other work on a shared machine only ever adds time, so each side is timed
as the best of a few runs, and the runs alternate (base, method, base, method, ...) so that a slow
spell hits both (`paired`). Even so two timings of the *same* work differ: `noise_band` measures by
how much, now, by timing one decode against itself, and `verdict` calls a ratio faster or slower
only outside that band. Per-prompt ratios are often bimodal (a prompt that repeats itself is another
regime), so `compare` measures the band on every prompt, reports the median and the spread, and
calls a method faster only when every prompt was faster beyond the band (`agreement`): with 3
prompts, 2 faster and 1 slower is "mixed", whatever the median says.
"""
import numbers
import statistics
import time
from dataclasses import dataclass

from ..drafters import as_drafter
from ..sampling import real, whole
from ..speculate import generate, speculative_generate
from ..methods.costs import call_costs, step_cost, step_costs  # noqa: F401 (the cost profile)


def timed(fn):
    """fn() -> (its result, wall seconds)."""
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def paired(base, method, repeats=3):
    """Run base() and method() alternately `repeats` times -> (base's result, method's result,
    base's best time, method's best time); their ratio is the speedup. Both must be deterministic
    (fixed seeds)."""
    repeats = whole(repeats, "repeats")
    t_base, t_method = [], []
    for _ in range(repeats):
        b, t = timed(base)
        t_base.append(t)
        m, t = timed(method)
        t_method.append(t)
    return b, m, min(t_base), min(t_method)


def per_prompt(ratios):
    """Per-prompt ratios (a list, an array, a tensor, a generator) -> a list of numbers; one number
    has no spread and no count of prompts: a ValueError says so (a TypeError from inside before)."""
    if isinstance(ratios, numbers.Real) or getattr(ratios, "ndim", 1) == 0:
        raise ValueError(f"ratios must hold one speedup per prompt (a list), got {ratios!r}")
    return [float(real(r, "each ratio")) for r in ratios]


def spread(ratios):
    """Per-prompt ratios (any iterable) -> "median (min-max)", e.g. "1.41x (1.15-1.85)"."""
    ratios = per_prompt(ratios)
    if not ratios:
        raise ValueError("no ratios to summarize: time at least one prompt")
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


BAND_FLOOR = 0.01  # the narrowest band noise_band reports: a 1% difference is never called


def band_text(band):
    """"+-5%"; "+-1%, its floor" for BAND_FLOOR, which noise_band reports when it measured less."""
    return f"+-{band:.0%}" + (", its floor" if band == BAND_FLOOR else "")


def noise_band(fn, repeats=3, pairs=3):
    """Time fn against itself with `paired`, `pairs` times -> the largest max(r, 1/r) - 1 seen (r:
    one pair's ratio; which side ran first does not matter): how far two timings of the same work
    land apart on this machine now. A speedup inside 1 +- band is no evidence either way. One
    pair can read +-0% (notebook 12 once; +-7% when run again), and a band of 0 calls any
    difference, so it is at least BAND_FLOOR; more pairs measure it better."""
    times = [paired(fn, fn, repeats)[2:] for _ in range(whole(pairs, "pairs"))]  # (t_a, t_b)
    return max(BAND_FLOOR, *(max(t_a / t_b, t_b / t_a) - 1 for t_a, t_b in times))


def verdict(ratio, band):
    """A speedup read against the noise band: "faster", "slower" or "the same (within noise)"."""
    if not real(band, "band") >= 0:  # a band of -1 would call every ratio "faster"
        raise ValueError(f"band must be >= 0 (0.05 for +-5%), got {band!r}")
    if not real(ratio, "ratio") > 0:  # a ratio of two times; NaN is none
        raise ValueError(f"ratio must be a speedup > 0 (base time / method time), got {ratio!r}")
    if ratio > 1 + band:
        return "faster"
    if ratio * (1 + band) < 1:  # two-sided as noise_band: 1 / ratio > 1 + band (0.9x: 11% slower)
        return "slower"
    return "the same (within noise)"


def agreement(ratios, band):
    """Per-prompt speedups against one band -> (verdict, "faster on 2, slower on 1 of 3 prompts").
    The verdict is "faster" or "slower" only when every prompt says so beyond the band, "the same
    (within noise)" when every prompt is inside it, and "mixed" otherwise: one prompt slower
    beyond the band is enough to withhold "faster", whatever the median."""
    said = [verdict(r, band) for r in per_prompt(ratios)]
    if not said:
        raise ValueError("agreement needs at least one ratio")
    labels = {"faster": "faster", "slower": "slower", "the same (within noise)": "within noise"}
    parts = [f"{short} on {said.count(word)}" for word, short in labels.items() if word in said]
    counts = f"{', '.join(parts)} of {len(said)} prompt{'s' if len(said) > 1 else ''}"
    return (said[0] if said.count(said[0]) == len(said) else "mixed"), counts


@dataclass
class Comparison:
    """What `compare` measured: per-item speedups (base time / method time), the base's and the
    method's results, and the noise band it was judged against."""
    ratios: list
    base: list
    method: list
    band: float

    @property
    def median(self):
        return statistics.median(self.ratios)

    @property
    def verdict(self):
        """"faster" / "slower" only when every item agrees beyond the band; else "mixed" or
        "the same (within noise)" (see `agreement`)."""
        return agreement(self.ratios, self.band)[0]

    def __str__(self):
        said, counts = agreement(self.ratios, self.band)
        return f"{spread(self.ratios)}: {said}, {counts} (noise band {band_text(self.band)})"


def compare(base, method, items, repeats=3, band=None):
    """Time base(item) against method(item) for each item with `paired` -> a Comparison (print it
    for "median (min-max): verdict, faster on k of n prompts (noise band)"). band: a noise band
    measured earlier in the same run; by default measured here: base(item) timed against itself
    once for each item, the largest max(r, 1/r) - 1, at least BAND_FLOOR (`noise_band`)."""
    items = list(items)
    if not items:
        raise ValueError("compare needs at least one item to time")
    if band is not None:
        verdict(1.0, band)  # a bad band (-1, "5%") is named before any timing, not after it
        band = float(band)  # a tensor's band prints as a number
    if band is None:
        band = max(noise_band(lambda: base(item), repeats, pairs=1) for item in items)
    ratios, bases, methods = [], [], []
    for item in items:
        b, m, t_base, t_method = paired(lambda: base(item), lambda: method(item), repeats)
        ratios.append(t_base / t_method)
        bases.append(b)
        methods.append(m)
    return Comparison(ratios, bases, methods, band)


def metered(target, drafter, new_tokens, gamma, temperature=1.0):
    """-> (method(item), spent): method runs the drafter through the loop on one (seed, ids) item;
    spent sums, over its runs, the seconds inside the drafter's `draft` and `score` (the loop calls
    each once a round; score is the verification call), the whole decode's seconds, rounds and
    tokens. It wraps this drafter object's two methods: meter a fresh drafter for each race."""
    drafter = as_drafter(drafter, target)  # a GPT becomes a ModelDrafter, as the loop would make it
    spent = dict(draft=0.0, score=0.0, seconds=0.0, rounds=0, tokens=0)

    def wrap(part, fn):
        def timed_call(*args, **kwargs):
            out, seconds = timed(lambda: fn(*args, **kwargs))
            spent[part] += seconds
            return out
        return timed_call
    drafter.draft, drafter.score = wrap("draft", drafter.draft), wrap("score", drafter.score)

    def method(item):
        seed, ids = item
        r = speculative_generate(target, drafter, ids, new_tokens, gamma=gamma,
                                 temperature=temperature, seed=seed)
        spent["seconds"] += r.stats.wall_time
        spent["rounds"] += r.stats.target_calls
        spent["tokens"] += len(r.tokens)
        return r
    return method, spent


def race(target, drafter, items, new_tokens, gamma, temperature=1.0, band=None, repeats=2):
    """`compare` the drafter through the loop against autoregressive decoding on (seed, ids) items
    -> (the Comparison, a line saying where a round's time went (`round_line`), {draft, score,
    rest} in autoregressive steps)."""
    base, items = dict(seconds=0.0, tokens=0), list(items)
    if not all(isinstance(item, (tuple, list)) and len(item) == 2 for item in items):
        raise ValueError("items must be (seed, ids) pairs, as list(enumerate(prompts)); a single "
                         "pair goes in a list")

    def plain(item):
        seed, ids = item
        r = generate(target, ids, new_tokens, temperature=temperature, seed=seed)
        base["seconds"] += r.stats.wall_time
        base["tokens"] += len(r.tokens)
        return r
    method, spent = metered(target, drafter, new_tokens, gamma, temperature)
    cmp = compare(plain, method, items, repeats, band)
    step = base["seconds"] / base["tokens"]  # one autoregressive step, in these same runs
    parts = {part: spent[part] / spent["rounds"] / step for part in ("draft", "score")}
    parts["rest"] = spent["seconds"] / spent["rounds"] / step - parts["draft"] - parts["score"]
    return cmp, round_line(parts, spent["tokens"] / spent["rounds"], cmp.band), parts


def round_line(parts, tokens, band):
    """A round's cost {draft, score, rest} in autoregressive steps and the tokens it yields -> a
    line adding them up. A round that costs more steps than its tokens is a slowdown: said as one
    only beyond the noise band (cost / tokens > 1 + band, as `verdict` reads a speedup), else as
    within it; either way the line names the round's largest part."""
    cost = sum(round(part, 2) for part in parts.values())  # the sum of the parts printed
    line = (f"a round: drafting {parts['draft']:.2f} + verification call {parts['score']:.2f} + "
            f"the rest of the loop {parts['rest']:.2f} = {cost:.2f} autoregressive steps, "
            f"for {tokens:.2f} tokens")
    if cost > tokens:
        names = {"draft": "drafting", "score": "the verification call", "rest": "the rest"}
        said = ("costs more steps than the tokens it yields" if cost > tokens * (1 + band) else
                f"costs about as many steps as the tokens it yields (within the noise band "
                f"{band_text(band)})")
        line += f"\n  -> a round {said}; its largest part is {names[max(parts, key=parts.get)]}"
    return line
