"""Which kernel is the baseline? Greedy decoding and prompt lookup on SmolLM2 under several kernels.

    python benchmarks/kernel_baseline.py [--max-new-tokens 96] [--repeats 3] [--threads 2]
                                         [--kernels packed mixed transposed]
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
decode of all the kernels.
"""
import argparse
import statistics

import torch

import minispec as ms
from minispec.bridge import smollm2
from minispec.bridge.linear import KERNELS, kernel
from minispec.kit.timing import paired
from real_model import FIGURES, FREE, KINDS


def times(model, ids, n, eos, gamma, repeats, kernels):
    """{kernel: (greedy seconds, lookup seconds, tokens)}, each pair timed alternating."""
    out = {}
    for name in kernels:
        def greedy():
            return ms.generate(model, ids, n, eos_token=eos).tokens

        def lookup():
            drafter = ms.load_drafter("lookup", model)
            return ms.speculative_generate(model, drafter, ids, n, gamma=gamma,
                                           eos_token=eos).tokens
        with kernel(name):
            a, b, t_greedy, t_lookup = paired(greedy, lookup, repeats)
        if a != b:
            raise AssertionError(f"lookup's tokens differ from greedy's under {name!r}")
        out[name] = (t_greedy, t_lookup, a)
    if len({tuple(tokens) for _, _, tokens in out.values()}) > 1:
        print("note: the kernels' greedy tokens differ (a float near-tie)")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--kernels", nargs="+", default=["packed", "mixed", "transposed"],
                    choices=KERNELS)
    ap.add_argument("--out", default=str(FIGURES / "kernel_baseline.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = smollm2.load()
    eos = tok.encode("<|im_end|>")[0]
    names, rows = args.kernels, []
    own, best, faster = {k: [] for k in names}, [], {k: [] for k in names}
    for kind, prompts in KINDS.items():
        for text in prompts:
            ids = tok.chat([{"role": "user", "content": text}])
            t = times(model, ids, args.max_new_tokens, eos, args.gamma, args.repeats, names)
            fastest = min(g for g, _, _ in t.values()), min(lk for _, lk, _ in t.values())
            ratios = [t[k][0] / t[k][1] for k in names]  # each kernel's lookup vs its greedy
            if prompts is not FREE:
                for k, r in zip(names, ratios):
                    own[k].append(r)
                    faster[k].append(t[names[0]][0] / t[k][0])  # greedy: first kernel / this one
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
    lines = [
        "# Which kernel is the baseline? (SmolLM2, temperature 0)", "",
        f"`python benchmarks/kernel_baseline.py --max-new-tokens {args.max_new_tokens} --repeats "
        f"{args.repeats} --threads {args.threads} --kernels {' '.join(names)}` (lookup at gamma "
        f"{args.gamma}). Times are the best of the repeats, in seconds, kernel by kernel: "
        f"{' / '.join(names)}.", "",
        "| kind | prompt | greedy s | lookup s | "
        + " | ".join(f"lookup vs greedy, {k}" for k in names)
        + " | the fastest lookup vs the fastest greedy |",
        "|---|---|---|---|" + "---|" * (len(names) + 1), *rows, "",
        f"Copy prompts, medians (min-max): lookup against its own kernel's greedy: {said}; the "
        f"fastest lookup against the fastest greedy: {statistics.median(best):.2f}x "
        f"({min(best):.2f}-{max(best):.2f}x); greedy faster than under {names[0]} by: "
        f"{quicker or 'no other kernel timed'}.", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines[-2:]))


if __name__ == "__main__":
    main()
