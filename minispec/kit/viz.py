"""Seeing speculative decoding: which drafted tokens did the target keep, and what did it add?

Plots (matplotlib) and explorers (ipywidgets) are imported lazily: `import minispec` stays light.
The rounds as text (trace_segments, ansi_trace, html_trace) live in kit/trace.py, reachable here.
"""
import inspect
import itertools

import numpy as np
import torch

from ..model import decode, encode
from ..sampling import check_sampling_args, probs, whole
from ..speculate import speculative_generate
from .theory import acceptance_rate, accepted_pmf, alpha_from_acceptance
from .trace import (COLORS, ansi_trace, drafted, ended_at_eos, html_trace,  # noqa: F401 (viz.*)
                    rounds_of, trace_segments)
from ..verify import residual


def _axes(ax, ncols=1, size=(7, 3)):
    import matplotlib.pyplot as plt
    if ax is not None:
        return ax.figure, ax
    return plt.subplots(1, ncols, figsize=size, layout="constrained")


def image(plot, *args, ncols=1, size=(7, 3), **kw):
    """plot(*args, ax=..., **kw) drawn on a figure pyplot never sees -> an IPython PNG Image, for
    a widget's callback: it may run on a kernel subshell thread (JupyterLab 4.6 handles widget
    messages there) while the inline backend redraws every open pyplot figure, and two threads
    drawing one figure tear it. Example: display(image(plot_acceptance, res.steps))"""
    import io
    from IPython.display import Image
    from matplotlib.figure import Figure
    fig = Figure(figsize=size, layout="constrained")
    plot(*args, ax=fig.subplots(1, ncols), **kw)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return Image(buf.getvalue(), format="png")


def plot_trace(steps, show_rejected=True, width=80, ax=None, decode=decode):
    """The colored trace as a static matplotlib figure (monospace; rejected newlines as ⏎)."""
    cells, row, col = [], 0, 0  # (row, col, text, kind): one text call per run of one kind
    segments = trace_segments(steps, show_rejected, decode)
    for kind, group in itertools.groupby(segments, key=lambda seg: seg[1]):
        text = "".join(t for t, _ in group).replace("\t", "    ")
        text = text.replace("\n", "⏎" if kind == "rejected" else "\n")
        text = "".join(ch if ch.isprintable() or ch == "\n" else "·" for ch in text)
        for i, line in enumerate(text.split("\n")):
            row, col = (row + 1, 0) if i or col + len(line) > width else (row, col)
            cells.append((row, col, line, kind))
            col += len(line)
    fig, ax = _axes(ax, size=(width * 0.1, 0.25 * (row + 3)))  # x: 1 unit a character
    for r, c, line, kind in cells:
        ax.text(c, -r, line, color=COLORS[kind], family="monospace", fontsize=11.5, va="center")
        if kind == "rejected":
            ax.plot([c, c + len(line)], [-r, -r], color=COLORS[kind], lw=0.8)
    x = 0  # the legend: an entry a kind shown, a character a unit (smaller type: room to spare)
    for kind in (k for k in COLORS if show_rejected or k != "rejected"):
        ax.text(x, -row - 2, "■ " + kind, color=COLORS[kind], fontsize=9, va="center")
        x += len(kind) + 4
    ax.set(xlim=(0, width), ylim=(-row - 2.5, 0.5), frame_on=False, xticks=[], yticks=[])
    return fig


def plot_acceptance(steps, ax=None):
    """Per target call: drafts kept (green), drafts rejected (red), the token the target added."""
    from matplotlib.ticker import MaxNLocator
    steps = rounds_of(steps)  # at least one round (plain generate's Result records none)
    fig, ax = _axes(ax)
    ended = np.array([s is steps[-1] and ended_at_eos(s) for s in steps])  # a kept eos: accepted
    kept, bonus = np.array([s.accepted for s in steps]) + ended, np.array([s.bonus for s in steps])
    rej = np.where(ended, 0, np.array([len(drafted(s)) for s in steps]) - kept)
    x, added = np.arange(1, len(steps) + 1), 1 - ended  # the target's own token, one a round
    ax.bar(x, kept, color=COLORS["accepted"], label="accepted draft")
    ax.bar(x, added, bottom=kept, color=np.where(bonus, COLORS["bonus"], COLORS["correction"]),
           label="target's token (blue: correction, purple: bonus)")
    ax.bar(x, rej, bottom=kept + added, color=COLORS["rejected"], alpha=0.35,
           label="rejected draft")
    total = kept.sum() + added.sum()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # calls 1, 2, 3: no 2.5
    ax.set(xlabel="target call", ylabel="tokens", ylim=(0, (kept + rej).max() + 3),
           title=f"{total} tokens in {len(steps)} target calls "
                 f"({total / max(1, len(steps)):.2f} per call)")
    ax.legend(fontsize=7, loc="upper right")
    return fig


def plot_pq(p, q, labels=None, top=None, ax=None):
    """p = min(p, q) (kept, sums to alpha) + max(0, p - q) (the residual's mass), q dashed, and the
    residual norm(max(0, p - q)) beside it; `top`: show only the likeliest tokens (sums use all).

    Example: plot_pq(torch.tensor([.5, .3, .2]), torch.tensor([.2, .2, .6]), labels="abc")
    """
    if torch.is_tensor(p) and p.dim() != 1:  # rows would be pooled into one alpha
        raise ValueError(f"plot_pq draws one p and one q, each (V,), got shape {tuple(p.shape)}")
    alpha = float(acceptance_rate(p, q))  # p, q: distributions of one shape, or a ValueError
    if labels is not None and len(labels) != len(p):
        raise ValueError(f"labels must name each of the {len(p)} tokens, got {len(labels)}")
    top = None if top is None else whole(top, "top (or None)")
    p, q = p.detach().float(), q.detach().float()
    idx = torch.argsort(torch.maximum(p, q), descending=True)[:top] if top else torch.arange(len(p))
    labels = [labels[i] if labels is not None else byte_label(i)
              for i in idx.tolist()]  # numpy labels: `if labels` was ambiguous
    kept, res = torch.minimum(p, q)[idx].numpy(), torch.clamp(p - q, min=0)[idx].numpy()
    x = np.arange(len(idx))
    if ax is not None and len(np.atleast_1d(ax)) != 2:  # one Axes: not subscriptable
        raise ValueError("plot_pq draws on two axes side by side: ax=(a, b), image(.., ncols=2)")
    fig, axes = _axes(ax, ncols=2, size=(9, 3)) if ax is None else (ax[0].figure, ax)
    axes[0].bar(x, kept, color=COLORS["accepted"], label="min(p, q): kept")
    axes[0].bar(x, res, bottom=kept, color=COLORS["correction"], label="max(0, p - q): residual")
    axes[0].bar(x, q[idx].numpy(), fill=False, edgecolor=COLORS["rejected"], ls="--",
                label="q (draft)")
    axes[0].set(title=f"p = min(p, q) + max(0, p - q);  alpha = {alpha:.3f}", xticks=x,
                xticklabels=labels)
    axes[0].legend(fontsize=7)
    if torch.clamp(p - q, min=0).sum() > 0:  # all of p - q: `top` may hide the residual's mass
        axes[1].bar(x, residual(p, q)[idx].numpy(), color=COLORS["correction"])
        title = f"residual norm(max(0, p - q)), used w.p. {1 - alpha:.3f}"
    else:  # p <= q everywhere (p == q): every draft is kept, no residual (verify's falls back to p)
        title = "no residual: max(0, p - q) = 0, every draft is kept"
    axes[1].set(title=title, xticks=x, xticklabels=labels)
    return fig


def plot_accept_hist(steps, alpha=None, gamma=None, ax=None):
    """Drafts kept per full-length round vs theory's accepted_pmf (alpha: fitted to the mean);
    a last round ended at a kept eos is left out (its drafts after the eos were never judged)."""
    steps = rounds_of(steps)
    steps = steps[:-1] if steps and ended_at_eos(steps[-1]) else steps
    gamma = max((len(drafted(s)) for s in steps), default=0) if gamma is None else gamma
    gamma = whole(gamma, "gamma (the drafts per round)", 0)  # 4.0 is 4; 0: nothing was drafted
    n = np.array([s.accepted for s in steps if len(drafted(s)) == gamma], dtype=int)
    if not (gamma and len(n)):
        raise ValueError(f"no round drafted gamma={gamma} tokens: no kept counts to plot")
    alpha = alpha_from_acceptance(n.mean() / gamma, gamma) if alpha is None else alpha
    if np.ndim(alpha):  # several alphas: the legend formats one
        raise ValueError(f"alpha must be one number in [0, 1], got {alpha!r}")
    fig, ax = _axes(ax, size=(5, 3))
    x = np.arange(gamma + 1)
    ax.bar(x, np.bincount(n, minlength=gamma + 1) / len(n), color=COLORS["accepted"],
           label=f"measured ({len(n)} rounds)")
    ax.plot(x, accepted_pmf(alpha, gamma), "ko--", label=f"geometric, alpha = {alpha:.3f}")
    ax.set(xlabel="drafts accepted per round", ylabel="fraction of rounds", xticks=range(gamma + 1))
    ax.legend(fontsize=8)
    return fig


def controls(**widgets):
    """name -> control, each labelled with its name in full ("temperature", not "temperat...").
    Example: interactive(fn, **controls(k=IntSlider(2, 1, 5)))"""
    for name, widget in widgets.items():
        widget.description, widget.style.description_width = name, "initial"
    return widgets


def texts(prompts, name):
    """The prompt texts of a list or a {label: text} dict, or a ValueError: a lone string would be
    read as one prompt a character, and token ids are not text (encode them back: decode(ids))."""
    given = list(prompts.values()) if isinstance(prompts, dict) else prompts
    if isinstance(prompts, str) or not isinstance(given, (list, tuple)) or not given:
        raise ValueError(f"{name} must be a non-empty list of texts (or a dict label -> text), "
                         f"got {prompts!r:.60}")
    if not all(isinstance(text, str) and text for text in given):
        raise ValueError(f"each of {name} must be a non-empty text (token ids: decode them)")
    return given


def trace_explorer(target, draft, prompts, max_new_tokens=60, gamma=4, temperature=0.0, seed=0,
                   encode=encode, decode=decode):
    """ipywidgets: gamma/temperature/prompt/seed -> rerun and redraw trace + acceptance per step.

    prompts: texts (or label -> text) for encode(text) -> ids; gamma, temperature, seed: the start.
    Example: trace_explorer(target, draft, ["def "])
    """
    import ipywidgets as w
    from IPython.display import HTML, display

    texts(prompts, "prompts")
    block = target.config.block_size  # a prompt is cropped to fit; the new tokens must fit too
    max_new_tokens = whole(max_new_tokens, f"max_new_tokens (block_size={block})", 1, block)
    gamma, seed = whole(gamma, "gamma"), whole(seed, "seed", -2**63, 2**64)
    check_sampling_args(temperature)  # the slider would silently clamp -1 to 0 (greedy)

    def show(gamma, temperature, prompt, seed):
        res = speculative_generate(target, draft, encode(prompt), max_new_tokens, gamma,
                                   temperature, seed=seed, crop_prompt=True)
        display(HTML(html_trace(res.steps, True, decode)), image(plot_acceptance, res.steps))
    temperature = w.FloatSlider(temperature, min=0, max=max(2, temperature), step=0.1)  # no clamp
    gamma = w.IntSlider(gamma, 1, max(10, gamma))
    return w.interactive(show, **controls(gamma=gamma, temperature=temperature,
                                          prompt=w.Dropdown(options=prompts), seed=w.IntText(seed)))


def pq_explorer(target, draft, prompt, top=12, temperature=1.0):
    """ipywidgets: p (target) and q (draft) after `prompt` (a text) under a temperature knob."""
    import ipywidgets as w
    from IPython.display import display

    ids, top = torch.tensor([encode(texts([prompt], "prompt")[0])]), whole(top, "top")
    check_sampling_args(temperature)  # the slider would silently clamp -1 to 0 (greedy)
    lp = target(ids.to(target.wte.weight.device))[0, -1].detach().cpu()  # (V,), plotted on the CPU
    lq = draft(ids.to(draft.wte.weight.device))[0, -1].detach().cpu()  # (V,)

    def show(temperature):
        display(image(plot_pq, probs(lp, temperature), probs(lq, temperature), top=top,
                      ncols=2, size=(9, 3)))
    knob = w.FloatSlider(temperature, min=0, max=max(2, temperature), step=0.05)
    return w.interactive(show, **controls(temperature=knob))


def show(*objs):
    """Print each function's or class's source, shown under its equation: one source of truth."""
    for obj in objs:
        print(inspect.getsource(obj))


def byte_label(token):
    """A token's byte as a short printable label: 'a', '\\n', '\\x00', '␣' (a space), and '\\xc3'
    for a byte of 128 or more (part of a character, not one on its own)."""
    token = whole(token, "a byte", 0, 256)
    if token == 32:
        return "␣"
    return repr(chr(token))[1:-1] if token < 128 else f"\\x{token:02x}"


def draw_tree(tree, path=(), ax=None, label=byte_label):
    """The tree left to right, the accepted path in green. label: token id -> text."""
    _, ax = _axes(ax, size=(7, 4))
    path = () if path is None else path
    d, y, rows = {-1: 0, **dict(enumerate(tree.depths().tolist()))}, {}, itertools.count()

    def place(i):  # a leaf takes the next row, a parent the mean of its children's rows
        kids = list(tree.children(i).values())
        y[i] = sum(map(place, kids)) / len(kids) if kids else -next(rows)
        return y[i]
    place(-1)
    for i, (t, par) in enumerate(zip(tree.tokens, tree.parents)):
        color = COLORS["accepted"] if i in path else "#9e9e9e"
        ax.plot([d[par], d[i]], [y[par], y[i]], color=color, lw=2 if i in path else 1, zorder=0)
        ax.text(d[i], y[i], label(t), ha="center", va="center", family="monospace",
                bbox=dict(boxstyle="round", fc="#c8e6c9" if i in path else "white", ec=color))
    ax.text(0, y[-1], "root", ha="center", va="center", bbox=dict(boxstyle="round", fc="#eeeeee"))
    ax.set(xlabel="depth", xticks=range(max(d.values()) + 1), yticks=[], frame_on=False)
    return ax

