"""A decode's rounds as text: which drafted tokens the target kept, which it rejected, and what it
added, as (text, kind) segments, colored for a terminal (ANSI) or a page (HTML). minispec.kit.viz
draws the same segments as pictures, and reaches these by the same names (viz.html_trace).
"""
import html

from ..model import decode
from ..rounds import Step

COLORS = {"accepted": "#2e7d32", "rejected": "#c62828", "correction": "#1565c0", "bonus": "#6a1b9a"}
_ANSI = {"accepted": "\033[32m", "rejected": "\033[9;31m", "correction": "\033[34m",
         "bonus": "\033[35m"}
_RESET = "\033[0m"


def rounds_of(steps):
    """A Result or its steps -> the list of Steps; anything else (None, a batch's list of Results)
    gets a ValueError: a trace shows the rounds of one prompt."""
    steps = getattr(steps, "steps", steps)  # a Result: its steps
    if not isinstance(steps, (list, tuple)) or not all(isinstance(s, Step) for s in steps):
        raise ValueError("give one prompt's Result or its steps (a batch: one row's, res[i]), "
                         f"got a {type(steps).__name__}")
    if not steps:  # plain generate's Result records no rounds: an empty picture said nothing
        raise ValueError("no rounds to show: give a speculative_generate result (or its steps)")
    return steps


def ended_at_eos(step):
    """Whether a decode's last round ended at an eos the target kept as a draft: rounds.finish cuts
    the round there, with the eos as its token, which is then a drafted child of the kept path's
    end. A correction never is (the lossless rules' residual is 0 at every rejected draft)."""
    return step.tree.children(step.path[-1] if step.path else -1).get(step.token) is not None


def drafted(step):
    """The kept tokens of a Step, then the rest of the draft's most probable branch: what a trace
    shows as drafted (a tree's other branches are not shown)."""
    tree, node = step.tree, step.path[-1] if step.path else -1
    out = [tree.tokens[i] for i in step.path]
    while tree.children(node):
        node = max(tree.children(node).values(), key=tree.score)
        out.append(tree.tokens[node])
    return out


def pieces(decode, context, tokens):
    """The text each token adds after context (ids), decoded together, not alone: a character
    spread over tokens (an emoji in byte-level BPE, an é from a byte model) shows whole on the
    token that completes it, where each token alone decoded to a '\ufffd'. An unfinished
    character (a trailing '\ufffd') waits for the next token; a decode whose text does not grow by
    appending (the test's `str`) falls back to each token alone."""
    shown, out = decode(context).rstrip("\ufffd") if context else "", []  # a decode may want ids
    for i, t in enumerate(tokens):
        text = decode(context + tokens[:i + 1]).rstrip("\ufffd")
        out.append(text[len(shown):] if text.startswith(shown) else decode([t]))
        shown = text
    return out


def trace_segments(steps, show_rejected=True, decode=decode):
    """Step records (one per round of `speculative_generate`) -> list of (text, kind), kind:
    accepted (a kept draft), rejected (a discarded draft, struck through), correction (the target's
    token after a rejection or an empty draft), bonus (its free token after a fully kept draft); a
    kept eos that ended the decode is accepted, with nothing after it (`ended_at_eos`).
    A segment a token; their texts join to decode(the output) (`pieces`).
    ansi_trace (terminal), html_trace and plot_trace color them alike. decode: ids -> text."""
    out, kept, steps = [], [], rounds_of(steps)
    for s in steps:
        ended = s is steps[-1] and ended_at_eos(s)  # the drafts after the eos were never judged
        path = drafted(s)
        out += [(t, "accepted") for t in pieces(decode, kept, path[:s.accepted])]
        kept += path[:s.accepted]
        if show_rejected and not ended:
            out += [(t, "rejected") for t in pieces(decode, kept, path[s.accepted:])]
        kind = "accepted" if ended else "bonus" if s.bonus else "correction"
        out += [(t, kind) for t in pieces(decode, kept, [s.token])]
        kept.append(s.token)
    text = decode(kept)  # a character the output left unfinished: shown at its end, as decoded
    out[-1] = (out[-1][0] + text[len(text.rstrip("\ufffd")):], out[-1][1])
    return out


def ansi_trace(steps, show_rejected=False, decode=decode):
    """The trace with ANSI colors for a terminal, followed by a legend line."""
    body = "".join(_ANSI[k] + t + _RESET for t, k in trace_segments(steps, show_rejected, decode))
    legend = "  ".join(_ANSI[k] + k + _RESET for k in COLORS if show_rejected or k != "rejected")
    return body + "\n\n" + legend


def html_trace(steps, show_rejected=True, decode=decode):
    """The trace as an HTML string (display it with IPython.display.HTML)."""
    def span(text, kind):
        style = f"color:{COLORS[kind]}"
        if kind == "rejected":
            style += ";text-decoration:line-through;opacity:0.6"
        return f'<span style="{style}" title="{kind}">{html.escape(text)}</span>'
    body = "".join(span(t, k) for t, k in trace_segments(steps, show_rejected, decode))
    legend = " ".join(span(k, k) for k in COLORS if show_rejected or k != "rejected")
    return f'<pre style="white-space:pre-wrap">{body}</pre><div>{legend}</div>'
