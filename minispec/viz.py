"""Seeing speculative decoding: which drafted tokens did the target keep, and what did it add?

Every round of `speculative_generate` leaves a Step record. `trace_segments` turns them into
(text, kind) pieces with kind one of
    accepted    a drafted token the target kept
    rejected    a drafted token the target threw away (shown struck through)
    correction  the target's own token after a rejection
    bonus       the target's free extra token after a fully accepted draft
which `ansi_trace` (terminal) and `html_trace` (notebook) color in the same way.
"""
import html

from .model import decode

COLORS = {"accepted": "#2e7d32", "rejected": "#c62828", "correction": "#1565c0", "bonus": "#6a1b9a"}
_ANSI = {"accepted": "\033[32m", "rejected": "\033[9;31m", "correction": "\033[34m", "bonus": "\033[35m"}
_RESET = "\033[0m"


def trace_segments(steps, show_rejected=True):
    """Step records -> list of (text, kind)."""
    out = []
    for s in steps:
        out += [(decode([t]), "accepted") for t in s.drafted[:s.accepted]]
        if show_rejected:
            out += [(decode([t]), "rejected") for t in s.drafted[s.accepted:]]
        out.append((decode([s.token]), "bonus" if s.bonus else "correction"))
    return out


def ansi_trace(steps, show_rejected=False):
    """The trace with ANSI colors for a terminal, followed by a legend line."""
    body = "".join(_ANSI[k] + t + _RESET for t, k in trace_segments(steps, show_rejected))
    legend = "  ".join(_ANSI[k] + k + _RESET for k in COLORS if show_rejected or k != "rejected")
    return body + "\n\n" + legend


def html_trace(steps, show_rejected=True):
    """The trace as an HTML string (display it with IPython.display.HTML)."""
    def span(text, kind):
        style = f"color:{COLORS[kind]}" + (";text-decoration:line-through;opacity:0.6" if kind == "rejected" else "")
        return f'<span style="{style}" title="{kind}">{html.escape(text)}</span>'
    body = "".join(span(t, k) for t, k in trace_segments(steps, show_rejected))
    legend = " ".join(span(k, k) for k in COLORS)
    return f'<pre style="white-space:pre-wrap">{body}</pre><div>{legend}</div>'
