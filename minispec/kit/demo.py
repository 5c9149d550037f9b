"""python -m minispec "def fib(n):" [--drafter NAME]: speculative decoding on the shipped models.

Prints the speculative continuation (kept drafts, corrections and bonus tokens in color), then a
table on the same prompt, in the same run: autoregressive decoding, the plain draft model, the
chosen drafter (one row if it is the plain draft), and the best shipped combination (prompt lookup
where the context repeats, else the distilled draft stopped at its first unsure token).

Each row is one paired measurement (kit.timing.paired: the method alternating with autoregressive
decoding, each side's best of --repeats): its autoregressive tokens/s, its own tokens/s and its
speedup all come from that pair (speedup = tokens/s / autoregressive tokens/s). Its verdict is
read against a noise band wide enough for both sides: autoregressive decoding timed against itself
and the method timed against itself (kit.timing.noise_band), whichever is wider. Rows that did the
same work (the same kind of drafter and draft model, the same tokens and target calls; their draft
calls may differ by a few cheap steps) differ only by noise: they share one verdict, read from
their median speedup against a band that holds them all.
"""
import argparse
import functools
import statistics
from dataclasses import dataclass

import torch

from ..drafters import ModelDrafter, PromptLookupDrafter
from ..methods import FallbackDrafter, load_drafter, load_model
from ..model import encode
from ..speculate import generate, speculative_generate
from . import timing
from .viz import ansi_trace

NAMES = ["draft", "draft_distilled", "draft_onpolicy", "lookup", "early_exit", "medusa", "hydra",
         "eagle"]


@dataclass
class Row:
    """One row of the table: a method timed against autoregressive decoding in one `paired` run."""
    name: str
    gamma: int
    result: object    # the method's Result
    baseline: object  # autoregressive decoding's Result in the same pair
    t_base: float     # autoregressive decoding's best time in this row's pair
    t_method: float   # the method's best time in the same pair
    band: float       # max(autoregressive noise band, the method's own)
    work: tuple       # what the clock measures: rows with equal work differ only by noise

    @property
    def ratio(self):  # the speedup: the same tokens, autoregressive time / the method's
        return self.t_base / self.t_method


def work(drafter, result):
    """The work a run did, for the clock: the drafter's kind and model, the tokens, the target
    calls (draft calls are left out: a few of a draft model's steps cost little next to them)."""
    model = getattr(drafter, "model", None)
    kind = (type(drafter).__name__, repr(getattr(model, "config", None)))
    return kind + (len(result.tokens), result.stats.target_calls)


def time_rows(autoregressive, methods, repeats, pairs=2):
    """methods: name -> (gamma, drafter, method()) -> a Row each. Each method is timed against
    autoregressive decoding, then against itself; autoregressive decoding against itself first."""
    band = timing.noise_band(autoregressive, repeats=repeats, pairs=pairs)  # A/A, this run
    rows = []
    for name, (gamma, drafter, method) in methods.items():
        base, res, t_base, t_method = timing.paired(autoregressive, method, repeats)
        own = timing.noise_band(method, repeats=repeats, pairs=pairs)
        band_row = max(band, own)
        rows.append(Row(name, gamma, res, base, t_base, t_method, band_row, work(drafter, res)))
    return rows


def verdicts(rows):
    """name -> (verdict, band, the other rows that did the same work). Rows of equal work share one
    verdict: their median speedup against a band that holds each of them (their spread is noise),
    two-sided as timing.noise_band's: a ratio r from the median m widens it to max(r/m, m/r) - 1."""
    groups = {}
    for row in rows:
        groups.setdefault(row.work, []).append(row)
    out = {}
    for group in groups.values():
        ratios = [row.ratio for row in group]
        mid = statistics.median(ratios)
        band = max([row.band for row in group] + [max(r / mid, mid / r) - 1 for r in ratios])
        for row in group:
            others = [o.name for o in group if o is not row]
            out[row.name] = (timing.verdict(mid, band), band, others)
    return out


def print_table(rows, repeats):
    """The table: autoregressive decoding's calls, then each row from its own pair."""
    judged = verdicts(rows)
    baseline = rows[0].baseline
    print(f"\n{'':20}{'gamma':>6}{'AR tokens/s':>13}{'tokens/s':>10}{'target calls':>14}"
          f"{'tokens/call':>13}{'speedup':>9}  verdict")
    print(f"{'autoregressive':20}{'':29}{baseline.stats.target_calls:14d}{1:13.2f}")
    for row in rows:
        stats = row.result.stats
        verdict, band, same = judged[row.name]
        note = f" (the same work as {', '.join(same)})" if same else ""
        ar_speed = len(row.baseline.tokens) / row.t_base
        speed = len(row.result.tokens) / row.t_method
        print(f"{row.name:20}{row.gamma:>6}{ar_speed:13.1f}{speed:10.1f}"
              f"{stats.target_calls:14d}{stats.tokens_per_call:13.2f}{row.ratio:8.2f}x  "
              f"{verdict} ({timing.band_text(band)}){note}")
    print(f"(each row is one pair: best of {repeats} runs, alternating with autoregressive\n"
          " decoding's; speedup = tokens/s / AR tokens/s; verdict: against the wider noise band\n"
          " of the two sides, each timed against itself in this run; rows that did the same work\n"
          " differ only by noise and share one verdict; one prompt: benchmarks/ time many)")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m minispec", description="Speculative decoding.")
    ap.add_argument("prompt", nargs="?", default="def fibonacci(n):\n    ")
    ap.add_argument("--drafter", default="draft", choices=NAMES, help="a shipped drafting method")
    ap.add_argument("--gamma", type=int, default=4, help="drafted tokens scored per target call")
    ap.add_argument("--temperature", type=float, default=0.8,
                    help="0 = greedy (these small byte models then tend to fall into runs of "
                         "spaces); "
                         "sampling is lossless, reproducible with --seed")
    ap.add_argument("--top-k", type=int)
    ap.add_argument("--top-p", type=float)
    ap.add_argument("--max-new-tokens", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2,
                    help="timed runs of each side of a pair (the best counts)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (tiny models gain little from more, and on a busy "
                         "machine extra threads wait on each other)")
    ap.add_argument("--show-rejected", action="store_true",
                    help="also print rejected drafts (struck through)")
    args = ap.parse_args(argv)
    if args.threads < 1:
        ap.error(f"--threads must be at least 1, got {args.threads}")
    try:  # a flag the library refuses (--gamma 0, --top-p 2, ...): its message, no traceback
        run(args)
    except ValueError as err:
        ap.error(str(err))


def run(args):
    """The demo on parsed flags: the colored continuation, then the table."""
    torch.set_num_threads(args.threads)
    target, ids = load_model("target"), encode(args.prompt)
    kw = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
              top_p=args.top_p, seed=args.seed, crop_prompt=True)
    unsure_draft = ModelDrafter(load_model("draft_distilled"), threshold=0.5)
    best = FallbackDrafter(PromptLookupDrafter(4, 3), unsure_draft, 8)
    chosen = "plain draft" if args.drafter == "draft" else args.drafter
    runs = {"plain draft": (load_drafter("draft", target), args.gamma),
            chosen: (load_drafter(args.drafter, target), args.gamma),
            "lookup, else draft": (best, 16)}  # name -> (drafter, gamma)
    autoregressive = functools.partial(generate, target, ids, **kw)
    methods = {}
    for name, (d, g) in runs.items():
        speculative_generate(target, d, ids, gamma=g, **dict(kw, max_new_tokens=8))  # warm up
        method = functools.partial(speculative_generate, target, d, ids, gamma=g, **kw)
        methods[name] = (g, d, method)
    rows = time_rows(autoregressive, methods, args.repeats)
    res = {row.name: row.result for row in rows}
    print(args.prompt + ansi_trace(res[chosen].steps, args.show_rejected))
    print_table(rows, args.repeats)
    if args.temperature == 0:
        same = all(row.result.tokens == row.baseline.tokens for row in rows)
        print("identical to autoregressive greedy output:", same)


if __name__ == "__main__":
    main()
