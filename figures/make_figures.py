"""Regenerate the key figures in figures/ from the shipped models. Run from the repository root:

    python figures/make_figures.py              # everything (the speedup benchmark takes minutes)
    python figures/make_figures.py --no-bench   # keep figures/speedup.png and figures/bench.md as they are

Writes
    trace.png            a speculative continuation: accepted, rejected, correction and bonus tokens
    p_vs_q.png           target p vs draft q for one next token: min(p, q), max(0, p - q), the residual
    acceptance_hist.png  drafts kept per round on held-out code vs the geometric prediction
    speedup.png, bench.md  measured vs predicted speedup over gamma (`python benchmarks/bench.py`, default settings)
The tests never run this file; the notebooks draw the same figures with minispec.viz.
"""
import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

OUT = Path(__file__).resolve().parent
sys.path.insert(0, str(OUT.parent))  # use this checkout's minispec even when it is not installed
sys.path.insert(0, str(OUT.parent / "benchmarks"))
import bench  # noqa: E402
import minispec as ms  # noqa: E402
from minispec import viz  # noqa: E402
from minispec.data import prompts  # noqa: E402


def save(fig, name):
    fig.savefig(OUT / name, dpi=120)
    plt.close(fig)
    print("wrote", OUT / name)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-bench", action="store_true", help="skip the speedup benchmark")
    args = ap.parse_args(argv)
    target, draft = ms.load_model("target"), ms.load_model("draft")

    prompt = "class Stack:\n    def __init__(self):\n        "
    res = ms.speculative_generate(target, draft, ms.encode(prompt), 120, gamma=4, temperature=0.7, seed=0)
    fig = viz.plot_trace(res.steps)
    fig.axes[0].set_title(f"gamma = 4, T = 0.7: {len(res.tokens)} tokens in {len(res.steps)} target calls",
                          fontsize=9, loc="left")
    save(fig, "trace.png")

    with torch.inference_mode():
        ids = torch.tensor([ms.encode("    def __repr__(self):\n        return ")])
        p, q = (ms.probs(m(ids)[0, -1], 1.0) for m in (target, draft))  # (V,) each
    save(viz.plot_pq(p, q, top=12), "p_vs_q.png")

    steps = [s for i, ids in enumerate(prompts(8))
             for s in ms.speculative_generate(target, draft, ids, 128, gamma=4, temperature=1.0, seed=i).steps]
    fig = viz.plot_accept_hist(steps, gamma=4)
    fig.axes[0].set_title("Held-out code, gamma = 4, T = 1", fontsize=9)
    save(fig, "acceptance_hist.png")

    if not args.no_bench:
        bench.main([])  # writes figures/speedup.png and figures/bench.md


if __name__ == "__main__":
    main()
