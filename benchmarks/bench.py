"""python benchmarks/bench.py -- measured speedup against theory, on held-out standard-library code.

    python benchmarks/bench.py [--gammas 1 2 3 4 5 6 7 8] [--temperatures 0 1] [--prompts 8]
                               [--max-new-tokens 100] [--repeats 3] [--out figures]

For each temperature and gamma, every prompt is decoded autoregressively and speculatively,
alternately, in this process, each side timed as the best of --repeats runs (benchmarks/common.py);
the speedup is the median of these per-prompt ratios, with their spread (the machine is noisy;
ratios from the same moment are much less so). Theory predicts the speedup from what was measured:
alpha (from the fraction of drafts kept), c = draft step / target step, and v = the cost of one
target call on gamma + 1 tokens relative to one on a single token (all measured at the mean
context length of the run). Per generated token that is the walltime formula
    (1 - alpha^(gamma+1)) / (1 - alpha) / (gamma * c + v);
both methods also pay once for reading the prompt (prefill, P target steps and P_d for the draft),
so for N new tokens the prediction is  (P + N) / (P + P_d + N (gamma * c + v) / E[tokens per call]).
Writes figures/bench.md and figures/speedup.png.
"""
import statistics
from pathlib import Path

import torch

from minispec import generate, load_model, speculative_generate
from minispec.kit.data import prompts as bench_prompts
from minispec.kit.timing import call_costs
from minispec.kit.theory import alpha_from_acceptance, expected_tokens

from common import count, out_folder, paired, parser, spread, temperature  # benchmarks/common.py

FIGURES = Path(__file__).resolve().parent.parent / "figures"


def predicted_speedup(alpha, gamma, c, v, n_tokens, prefill=0.0, draft_prefill=0.0):
    """theory.speedup for n_tokens new tokens, counting the one-off cost of reading the prompt,
    which both methods pay (prefill: target steps it costs; draft_prefill: the draft's, in target
    steps): (prefill + n) / (prefill + draft_prefill + n (gamma c + v) / E[tokens per call])."""
    per_token = (gamma * c + v) / expected_tokens(alpha, gamma)  # target steps per new token
    return (prefill + n_tokens) / (prefill + draft_prefill + n_tokens * per_token)


def run(gammas, temperatures, n_prompts, max_new_tokens, out=FIGURES, draft_name="draft",
        repeats=3):
    target, draft = load_model("target"), load_model(draft_name)
    prompts = bench_prompts(n_prompts)
    ctx = len(prompts[0]) + max_new_tokens // 2  # the mean context while decoding
    calls = {"step": (target, 1, ctx), "draft": (draft, 1, ctx)}  # a round's calls, in turn
    t = call_costs(calls | {g: (target, g + 1, ctx) for g in gammas}, reps=40)
    t1 = t["step"]
    c, v = t["draft"] / t1, {g: t[g] / t1 for g in gammas}
    # prefill apart: a long call in the rotation would evict the tiny models' weights from cache
    pre = call_costs({m: (m, len(prompts[0]), 0) for m in (target, draft)}, reps=20)
    P, Pd = pre[target] / t1, pre[draft] / t1
    print(f"target step {t1 * 1e3:.2f} ms, draft step ratio c = {c:.3f}, prefill P = {P:.1f}, "
          f"P_d = {Pd:.1f} target steps; verify cost v(gamma+1): "
          + " ".join(f"{g}:{v[g]:.2f}" for g in gammas))
    generate(target, prompts[0], 16)  # warm up
    rows = []
    head = ("| temp | gamma | acceptance | tokens/call | speedup (median, min-max) | predicted "
            "| pred/meas |")
    print(head)
    for temp in temperatures:
        for g in gammas:
            ratios, kept, drafted, calls, toks = [], 0, 0, 0, 0
            for i, ids in enumerate(prompts):
                kw = dict(max_new_tokens=max_new_tokens, temperature=temp, seed=i)
                _, sp, t_ar, t_sp = paired(
                    lambda: generate(target, ids, **kw),
                    lambda: speculative_generate(target, draft, ids, gamma=g, **kw), repeats)
                ratios.append(t_ar / t_sp)
                kept += sum(s.accepted for s in sp.steps)
                drafted += sp.stats.drafted
                calls += sp.stats.target_calls
                toks += len(sp.tokens)
            acc = kept / drafted
            alpha = alpha_from_acceptance(acc, g)
            pred = predicted_speedup(alpha, g, c, v[g], max_new_tokens, P, Pd)
            meas = statistics.median(ratios)
            rows.append(dict(temp=temp, gamma=g, acceptance=acc, tokens_per_call=toks / calls,
                             speedup=meas, spread=spread(ratios), predicted=pred))
            print(f"| {temp} | {g} | {acc:.3f} | {toks / calls:.2f} | {spread(ratios)} | "
                  f"{pred:.2f}x | {pred / meas:.2f} |", flush=True)
    out.mkdir(exist_ok=True)
    lines = [f"Target step {t1 * 1e3:.2f} ms; c = {c:.3f}; prefill P = {P:.1f}, "
             f"P_d = {Pd:.1f} target steps; "
             f"target + {draft_name}; {n_prompts} held-out prompts, {max_new_tokens} new tokens; "
             f"torch threads {torch.get_num_threads()}.",
             "v(gamma+1) = " + ", ".join(f"{v[g]:.2f}" for g in gammas)
             + f" for gamma = {gammas[0]}..{gammas[-1]}.",
             "", head, "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['temp']} | {r['gamma']} | {r['acceptance']:.3f} | {r['tokens_per_call']:.2f} "
              f"| {r['spread']} | {r['predicted']:.2f}x | {r['predicted'] / r['speedup']:.2f} |"
              for r in rows]
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    plot(rows, out / "speedup.png", f"Speculative decoding, shipped target + {draft_name} (CPU)")
    return rows


def plot(rows, path, title="Speculative decoding, shipped target + draft (CPU)"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for temp, color in zip(sorted({r["temp"] for r in rows}), ("C0", "C3")):
        rs = [r for r in rows if r["temp"] == temp]
        gammas = [r["gamma"] for r in rs]
        ax.plot(gammas, [r["speedup"] for r in rs], "o-", color=color, label=f"measured, T={temp}")
        ax.plot(gammas, [r["predicted"] for r in rs], "--", color=color, label=f"theory, T={temp}")
    ax.axhline(1, color="gray", lw=0.8)
    ax.set(xlabel="gamma (drafted tokens per target call)", ylabel="speedup vs autoregressive",
           title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--gammas", type=count, nargs="+", default=list(range(1, 9)))
    ap.add_argument("--temperatures", type=temperature, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--prompts", type=count, default=8)
    ap.add_argument("--max-new-tokens", type=count, default=100)
    ap.add_argument("--draft", default="draft",
                    help="shipped draft name (e.g. draft_distilled) or a .pt path")
    ap.add_argument("--repeats", type=count, default=3,
                    help="runs of each side per prompt; the best time counts")
    ap.add_argument("--out", type=out_folder, default=FIGURES,
                    help="folder for bench.md and speedup.png")
    args = ap.parse_args(argv)
    run(args.gammas, args.temperatures, args.prompts, args.max_new_tokens, args.out, args.draft,
        args.repeats)


if __name__ == "__main__":
    main()
