"""What every benchmark shares: how a speedup is measured on a noisy machine, and how its command
line is read. The timing functions live in the package's kit (minispec/kit/timing.py), so that
notebooks, the demo and the benchmarks time one way: paired, alternating, best of a few runs, with
the spread reported. The argument types below refuse a bad value before minutes of timing, not
after (a typo in --out used to lose a whole run's results at its last line)."""
import argparse
from pathlib import Path

from minispec.kit.timing import agreement, compare, noise_band, paired, spread, timed, verdict

__all__ = ["agreement", "compare", "noise_band", "paired", "spread", "timed", "verdict", "parser",
           "count", "temperature", "out_file", "out_folder"]


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose --help shows every option's default (where --out writes, too)."""

    def add_argument(self, *args, **kwargs):
        kwargs.setdefault("help", "default: %(default)s")  # no help: argparse printed no default
        return super().add_argument(*args, **kwargs)


def parser(doc):
    """The script's Parser: its docstring's first paragraph as the description (a first line
    alone ended mid-sentence), each default shown beside its help."""
    return Parser(description=doc.split("\n\n")[0],
                  formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def count(text):
    """argparse type: an integer >= 1 (prompts, tokens, repeats, threads, gammas, batch sizes)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def temperature(text):
    """argparse type: a finite temperature >= 0 (0: greedy)."""
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (0: greedy), got {text}")
    return value


def out_file(text):
    """argparse type: a file the script writes at its end; its folder is made now, and a folder
    given where a file is wanted is refused now."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    return text


def out_folder(text):
    """argparse type: a folder the script writes its files into, made now if missing."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file: give a folder")
    path.mkdir(parents=True, exist_ok=True)
    return path
