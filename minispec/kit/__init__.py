"""The notebook kit, shipped in the wheel so that a Colab notebook needs nothing else: `viz`
(plots, explorers, `show`; the traces as text in `trace`), `data` (the held-out text and
prompts), `timing` (paired timings, noise bands, verdicts; the cost profile in `costs`),
`checks` (exact laws, chi-square, repeated n-grams) and `demo` (python -m minispec)."""
from . import checks, data, timing, viz

__all__ = ["checks", "data", "timing", "viz"]
