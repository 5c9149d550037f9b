"""The learned stop (SpecDec++) against a fixed gamma, the confidence stop and the +2/-1 heuristic,
on held-out code prompts, at temperature 0 and 1.

    python benchmarks/learned_stop.py [--prompts 8] [--max-new-tokens 64] [--repeats 2]

Writes figures/learned_stop.md and figures/learned_stop_calibration.png (about 4 minutes here).
Every method uses the shipped draft; the stops draft at most 8 tokens a round, and the +2/-1
heuristic has no cap (it reached 14 a round in a check). Counted
(CPU-independent) on the timed runs themselves, pooled over the prompts: new tokens per target
call, draft calls per new token, and WASTED draft calls per new token (draft forward passes whose
token the target rejected or never judged because an earlier one was rejected: each drafted token
of a chain costs one draft call). Timed: each method against autoregressive decoding of the same
prompt, alternating, best of --repeats (minispec.kit.timing.compare), the median and spread over
the prompts, called against a noise band measured in the same run (autoregressive decoding against
itself); then the learned stop straight against the confidence stop and against fixed 8. Last, a
threshold sweep of both stops (counts only) and the head's reliability on rounds after 10 other
held-out prompts (ms.data.prompts(10, offset=8)), binned by predicted acceptance.
"""
import time
from pathlib import Path

import matplotlib
import torch

import minispec as ms
from minispec.kit.data import prompts as held_prompts
from minispec.kit.training import acceptance_rows, reliability
from minispec.methods.learned_stop import LearnedStopDrafter, load_stop_head

from common import compare, count, noise_band, out_file, parser  # benchmarks/common.py

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIGURES = Path(__file__).resolve().parent.parent / "figures"


def counts(results):
    """Pooled over one method's runs: tokens per call, draft calls and wasted draft calls per
    token, and the share of drafted tokens kept."""
    steps = [s for r in results for s in r.steps]
    tokens = sum(len(r.tokens) for r in results)
    drafted = sum(len(s.tree.tokens) for s in steps)
    wasted = sum(len(s.tree.tokens) - s.accepted for s in steps)
    calls = sum(r.stats.draft_calls for r in results)
    return dict(tpc=tokens / len(steps), draft=calls / tokens, wasted=wasted / tokens,
                kept=(drafted - wasted) / drafted)


def dominates(a, b):
    """Counts a do better than b: as many tokens per call or more for as few draft calls per
    token or fewer, one of the two strictly."""
    return (a["tpc"] >= b["tpc"] and a["draft"] <= b["draft"]
            and (a["tpc"] > b["tpc"] or a["draft"] < b["draft"]))


def methods(target, draft, head):
    """name -> (drafter, gamma): the rows of the table."""
    return {"fixed 4": (draft, 4), "fixed 8": (draft, 8),
            "heuristic +2/-1 (from 4)": (draft, ms.Heuristic(4)),
            "confidence stop 0.5 (max 8)": (ms.ModelDrafter(draft, threshold=0.5), 8),
            "learned stop 0.5 (max 8)": (LearnedStopDrafter(draft, head, 0.5), 8),
            "learned stop 0.8 (max 8)": (LearnedStopDrafter(draft, head, 0.8), 8)}


def calibration_plot(bins_by_t, path):
    fig, axes = plt.subplots(1, 2, figsize=(9, 4), layout="constrained")
    for ax, (T, bins) in zip(axes, bins_by_t.items()):
        pred = [b[3] for b in bins]
        seen = [b[4] for b in bins]
        ax.plot([0, 1], [0, 1], color="gray", linestyle="--", label="calibrated")
        ax.plot(pred, seen, "o-", label="shipped head")
        for b in bins:
            ax.annotate(f"{b[2]}", (b[3], b[4]), textcoords="offset points", xytext=(4, -12),
                        fontsize=8)
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="predicted acceptance a (bin mean)",
               ylabel="observed acceptance (bin mean)",
               title=f"T = {T:g}: " + ("kept = target's argmax" if T == 0 else "min(1, p/q)"))
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle("Learned stop: reliability on rounds after held-out prompts (numbers: rows)")
    fig.savefig(path, dpi=100)


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--prompts", type=count, default=8)
    ap.add_argument("--max-new-tokens", type=count, default=64)
    ap.add_argument("--repeats", type=count, default=2)
    ap.add_argument("--out", type=out_file, default=str(FIGURES / "learned_stop.md"))
    args = ap.parse_args(argv)
    t0 = time.time()
    torch.set_num_threads(1)
    target, draft, head = ms.load_model("target"), ms.load_model("draft"), load_stop_head()
    prompts, n = held_prompts(args.prompts), args.max_new_tokens
    items = list(enumerate(prompts))
    lines = ["# The learned stop (SpecDec++) against fixed and adaptive draft lengths", "",
             f"`python benchmarks/learned_stop.py` ({len(prompts)} held-out prompts, {n} new "
             f"tokens, best of {args.repeats} alternating runs, torch threads 1). Counts are "
             "pooled over the prompts; wasted = draft calls whose token the target rejected (or "
             "never judged, after an earlier rejection). Speedups: per-prompt ratios against "
             "autoregressive decoding, median (min-max); faster or slower only where every "
             "prompt is beyond a noise band measured in the same run, else mixed. The machine "
             "is shared: timings move from run to run, counts do not. At T = 0 these tiny "
             "models' greedy text loops: its counts are not those of real text.", ""]
    ms.generate(target, prompts[0], 16)  # warm up
    for T in (0.0, 1.0):
        def base(item):
            return ms.generate(target, item[1], n, temperature=T, seed=item[0])

        band = noise_band(lambda: base(items[0]), args.repeats)
        lines += [f"## Temperature {T:g} (noise band +-{band:.0%})", "",
                  "| method | tokens/call | draft calls/token | wasted draft calls/token | kept "
                  "| speedup vs autoregressive |", "|---|---|---|---|---|---|"]
        runs = {}
        for name, (drafter, gamma) in methods(target, draft, head).items():
            def spec(item, drafter=drafter, gamma=gamma):
                return ms.speculative_generate(target, drafter, item[1], n, gamma=gamma,
                                               temperature=T, seed=item[0])

            cmp = compare(base, spec, items, args.repeats, band)
            if T == 0:
                assert [r.tokens for r in cmp.method] == [r.tokens for r in cmp.base], name
            runs[name] = spec
            c = counts(cmp.method)
            lines.append(f"| {name} | {c['tpc']:.2f} | {c['draft']:.2f} | {c['wasted']:.2f} | "
                         f"{c['kept']:.2f} | {cmp} |")
            print(lines[-1], flush=True)
        lines.append("")
        for other in ("confidence stop 0.5 (max 8)", "fixed 8"):
            cmp = compare(runs[other], runs["learned stop 0.5 (max 8)"], items, args.repeats,
                          band)
            lines.append(f"Learned stop 0.5 against {other}, paired: {cmp}.")
        lines += ["", "Threshold sweep (counts only): tokens/call, draft calls/token, wasted "
                  "draft calls/token", "", "| stop | threshold | tokens/call | draft calls/token "
                  "| wasted/token |", "|---|---|---|---|---|"]
        sweep = {"confidence": [], "learned": []}
        for kind, make in (("confidence", ms.ModelDrafter), ("learned", LearnedStopDrafter)):
            for h in (0.3, 0.5, 0.7, 0.8, 0.9):
                drafter = (make(draft, threshold=h) if kind == "confidence"
                           else make(draft, head, h))
                res = [ms.speculative_generate(target, drafter, ids, n, gamma=8, temperature=T,
                                               seed=i) for i, ids in items]
                c = counts(res)
                sweep[kind].append(c)
                lines.append(f"| {kind} | {h} | {c['tpc']:.2f} | {c['draft']:.2f} | "
                             f"{c['wasted']:.2f} |")
        beaten = {kind: sum(any(dominates(o, c) for o in sweep[other]) for c in sweep[kind])
                  for kind, other in (("learned", "confidence"), ("confidence", "learned"))}
        lines += ["", f"Of the 5 thresholds of each stop, {beaten['learned']} learned ones are "
                  "beaten by a confidence one (at least as many tokens per call for at most as "
                  f"many draft calls per token, one of them strictly), and {beaten['confidence']} "
                  "confidence ones by a learned one.", ""]
        print("\n".join(lines[-16:]), flush=True)
    others = held_prompts(10, offset=args.prompts)
    bins = {}
    lines += ["## Calibration of the shipped head", "",
              f"Rounds of fixed chains of 8 drafts after {len(others)} other held-out prompts "
              f"({n} new tokens each); every drafted token is a row, its label the target's "
              "verdict given the drafts before it (T = 0: the target's argmax; T = 1: min(1, "
              "p/q)). Binned by the predicted a: rows, mean predicted, mean observed.", "",
              "| T | bin | rows | predicted | observed |", "|---|---|---|---|---|"]
    for T in (0.0, 1.0):
        f, y, _ = acceptance_rows(target, draft, others, T, n)
        with torch.no_grad():
            bins[T] = reliability(head(f, T > 0), y)
        for lo, hi, rows, pa, py in bins[T]:
            lines.append(f"| {T:g} | [{lo:.1f}, {hi:.1f}) | {rows} | {pa:.3f} | {py:.3f} |")
    png = Path(args.out).with_name(Path(args.out).stem + "_calibration.png")  # beside --out
    calibration_plot(bins, png)
    lines += ["", f"![reliability]({png.name})", "",
              f"(run time {time.time() - t0:.0f} s)"]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-12:]))


if __name__ == "__main__":
    main()
