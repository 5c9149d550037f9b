"""Which kernel is the baseline? Greedy decoding and prompt lookup on SmolLM2 under several kernels.

    python benchmarks/kernel_baseline.py [--max-new-tokens 96] [--repeats 3] [--threads 2]
                                         [--kernels packed mixed transposed]
                                         [--method "edit lookup, match length"]
                                         [--plot figures/kernel_baseline.png]
                                         [--out figures/kernel_baseline.md]

bridge/linear.py's default, "packed" (oneDNN on packed weights), made the cheaper one-token step
on the CPU of figures/real_model.md; on the Intel Xeon of figures/real_model_intel.md torch's
nn.Linear did, while packing still made the cheaper call over 4 tokens. "mixed" takes each:
nn.Linear for one token, packed for more; "transposed" multiplies by a stored W^T. A speedup is
only as honest as its baseline, so for each prompt of benchmarks/real_model.py (9 copy-heavy, 3
free writing; temperature 0, stopping at <|im_end|>) this times generate against
speculative_generate with prompt lookup (gamma 3) under each kernel, paired and alternating
(kit.timing.paired, the best of --repeats a side), stops if a kernel's lookup differs from its
greedy decode, says so if two kernels' greedy decodes differ (a float near-tie), and reports
lookup against its own kernel's greedy decode and the fastest lookup against the fastest greedy
decode of all the kernels. --method times another of real_model.py's drafters in lookup's place
(with its gamma: the match-length rule's own, real_model.LONG), made once per kernel and prompt.
--plot draws, for each kernel, its cost profile v(k) (kit.costs, after a 300-token context, measured
in the same run) beside the time per new token over the copy prompts, greedy and speculative: a
kernel's step and the slope of its v(k) set both the baseline and what speculation can save on it.
"""
import statistics

import torch

import minispec as ms
from minispec.bridge import smollm2
from minispec.bridge.linear import KERNELS, kernel
from minispec.kit.costs import call_costs
from minispec.kit.timing import paired
from real_model import FIGURES, FREE, KINDS, METHODS, drafter_for, policy_for
from common import count, out_file, parser  # benchmarks/common.py


def times(model, ids, n, eos, gamma, repeats, kernels, method="lookup"):
    """{kernel: (greedy seconds, `method` seconds, tokens)}, each pair timed alternating."""
    out = {}
    for name in kernels:
        def greedy():
            return ms.generate(model, ids, n, eos_token=eos).tokens

        def lookup():
            return ms.speculative_generate(model, drafter, ids, n,
                                           gamma=policy_for(method, gamma), eos_token=eos).tokens
        with kernel(name):
            drafter = drafter_for(method, model)  # the priced one measures v(k) now, untimed
            a, b, t_greedy, t_lookup = paired(greedy, lookup, repeats)
        if a != b:
            raise AssertionError(f"{method}'s tokens differ from greedy's under {name!r}")
        out[name] = (t_greedy, t_lookup, a)
    if len({tuple(tokens) for _, _, tokens in out.values()}) > 1:
        print("note: the kernels' greedy tokens differ (a float near-tie)")
    return out


KS = [1, 2, 3, 4, 6, 8, 12, 16]  # the profile's k


def plot(path, names, method, profiles, per_token):
    """Left: v(k) per kernel (its one-token step in the legend); right: ms per new token over the
    copy prompts, greedy beside `method`, with the ratio above each pair."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
    for name in names:
        costs = profiles[name]
        axes[0].plot(KS, [costs[k] / costs[1] for k in KS], "o-",
                     label=f"{name}: one-token step {1e3 * costs[1]:.1f} ms")
    axes[0].axhline(1, color="gray", lw=0.8)
    axes[0].set(xlabel="k: tokens in one forward (after 300 cached)", ylabel="v(k) = t(k) / t(1)",
                title="verification cost, in one-token steps")
    x = range(len(names))
    greedy = [1e3 * per_token[k][0] for k in names]
    spec = [1e3 * per_token[k][1] for k in names]
    axes[1].bar([i - 0.2 for i in x], greedy, 0.4, label="greedy (generate)")
    axes[1].bar([i + 0.2 for i in x], spec, 0.4, label=method)
    for i, (g, m) in enumerate(zip(greedy, spec)):
        axes[1].annotate(f"{g / m:.2f}x", (i, max(g, m)), ha="center", va="bottom")
    axes[1].set_xticks(list(x), names)
    axes[1].set(ylabel="ms per new token", title="copy prompts: all time / all new tokens")
    axes[1].margins(y=0.15)
    for ax in axes:
        ax.legend(fontsize=8)
    fig.savefig(path, dpi=100)


def main():
    ap = parser(__doc__)
    ap.add_argument("--max-new-tokens", type=count, default=96)
    ap.add_argument("--repeats", type=count, default=3)
    ap.add_argument("--threads", type=count, default=2)
    ap.add_argument("--gamma", type=count, default=3)
    ap.add_argument("--kernels", nargs="+", default=["packed", "mixed", "transposed"],
                    choices=KERNELS)
    ap.add_argument("--method", default="lookup", choices=METHODS,
                    help="the drafter timed against greedy decoding (real_model.py's names)")
    ap.add_argument("--out", type=out_file, default=str(FIGURES / "kernel_baseline.md"))
    ap.add_argument("--plot", type=out_file,
                    help="also draw v(k) and ms per token per kernel to this PNG")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = smollm2.load()
    eos = tok.encode("<|im_end|>")[0]
    names, rows = args.kernels, []
    own, best, faster = {k: [] for k in names}, [], {k: [] for k in names}
    spent = {k: [0.0, 0.0, 0] for k in names}  # copy prompts: greedy s, method s, new tokens
    for kind, prompts in KINDS.items():
        for text in prompts:
            ids = tok.chat([{"role": "user", "content": text}])
            t = times(model, ids, args.max_new_tokens, eos, args.gamma, args.repeats, names,
                      args.method)
            fastest = min(g for g, _, _ in t.values()), min(lk for _, lk, _ in t.values())
            ratios = [t[k][0] / t[k][1] for k in names]  # each kernel's lookup vs its greedy
            if prompts is not FREE:
                for k, r in zip(names, ratios):
                    own[k].append(r)
                    faster[k].append(t[names[0]][0] / t[k][0])  # greedy: first kernel / this one
                    spent[k] = [a + b for a, b in zip(spent[k], (t[k][0], t[k][1], len(t[k][2])))]
                best.append(fastest[0] / fastest[1])
            cells = [" / ".join(f"{t[k][j]:.2f}" for k in names) for j in (0, 1)]
            rows.append(f"| {kind} | {text[:40]} | {cells[0]} | {cells[1]} | "
                        + " | ".join(f"{r:.2f}" for r in ratios)
                        + f" | {fastest[0] / fastest[1]:.2f} |")
            print(rows[-1], flush=True)
    said = "; ".join(f"{k} {statistics.median(v):.2f}x ({min(v):.2f}-{max(v):.2f}x)"
                     for k, v in own.items())
    quicker = "; ".join(f"{k} {statistics.median(v):.2f}x" for k, v in faster.items()
                        if k != names[0])
    m = args.method
    flag = f' --method "{m}"' if m != "lookup" else ""
    flag += f" --plot {args.plot}" if args.plot else ""
    g = policy_for(m, args.gamma)
    g = f"at most {g}, set by its match" if ", match length" in m else g
    lines = [
        "# Which kernel is the baseline? (SmolLM2, temperature 0)", "",
        f"`python benchmarks/kernel_baseline.py --max-new-tokens {args.max_new_tokens} --repeats "
        f"{args.repeats} --threads {args.threads} --kernels {' '.join(names)}{flag}` ({m}, "
        f"gamma {g}). Times are the best of the repeats, in seconds, kernel by kernel: "
        f"{' / '.join(names)}.", "",
        f"| kind | prompt | greedy s | {m} s | "
        + " | ".join(f"{m} vs greedy, {k}" for k in names)
        + f" | the fastest {m} vs the fastest greedy |",
        "|---|---|---|---|" + "---|" * (len(names) + 1), *rows, "",
        f"Copy prompts, medians (min-max): {m} against its own kernel's greedy: {said}; the "
        f"fastest {m} against the fastest greedy: {statistics.median(best):.2f}x "
        f"({min(best):.2f}-{max(best):.2f}x); greedy faster than under {names[0]} by: "
        f"{quicker or 'no other kernel timed'}.", ""]
    summary = lines[-2]
    if args.plot:
        profiles = {}
        for name in names:
            with kernel(name):
                profiles[name] = call_costs({k: (model, k, 300) for k in KS})
        per_token = {k: (g / n, sp / n) for k, (g, sp, n) in spent.items()}
        plot(args.plot, names, m, profiles, per_token)
        lines += ["v(k) after a 300-token context (kit.costs.call_costs, median of 25), and ms per "
                  "new token over the copy prompts (greedy / " + m + "):", "",
                  "| kernel | one-token step | " + " | ".join(f"v({k})" for k in KS[1:])
                  + " | greedy ms/token | speculative ms/token |",
                  "|---|---|" + "---|" * (len(KS) + 1)]
        lines += [f"| {k} | {1e3 * profiles[k][1]:.1f} ms | "
                  + " | ".join(f"{profiles[k][j] / profiles[k][1]:.2f}" for j in KS[1:])
                  + f" | {1e3 * per_token[k][0]:.1f} | {1e3 * per_token[k][1]:.1f} |"
                  for k in names]
        lines += ["", f"![v(k) and ms per token per kernel]({args.plot.split('/')[-1]})", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(summary)


if __name__ == "__main__":
    main()
