"""The notebook kit, shipped in the wheel so that a Colab notebook needs nothing else: `viz`
(traces, plots, explorers, `show`), `data` (the held-out text and prompts), `demo` (python -m
minispec)."""
from . import data, timing, viz

__all__ = ["data", "timing", "viz"]
