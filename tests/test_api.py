"""The public API's shape: names that explain themselves, no name shadowing a submodule, ONE speculative loop.

The contract (DESIGN.md): `ms.decode` is the byte decoder, no public name shadows a submodule, and
`speculative_generate` is the only decoding loop besides `generate`: every drafting method is a Drafter
of it, and no other function of the package applies a verification rule.
"""
import importlib
import inspect
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import minispec as ms

ROOT = Path(__file__).resolve().parents[1]
SUBMODULES = sorted(m.name for m in pkgutil.iter_modules(ms.__path__) if m.name != "__main__")
MEANT_AS_MODULES = {"viz", "data"}  # exposed on purpose: ms.viz.plot_pq(...), ms.data.prompts()


def modules():
    return [importlib.import_module(f"minispec.{name}") for name in SUBMODULES]


def test_every_submodule_imports():
    for name in SUBMODULES:
        mod = importlib.import_module(f"minispec.{name}")
        assert mod.__name__ == f"minispec.{name}"
    import minispec.speculate
    assert minispec.speculate.speculative_generate is ms.speculative_generate


def test_no_public_name_shadows_a_submodule():
    """`minispec.X` is the submodule X whenever minispec/X.py exists (importing it cannot rebind a function of
    that name), and the public names (__all__) are functions and classes, not modules."""
    for name in SUBMODULES:
        assert getattr(ms, name) is sys.modules[f"minispec.{name}"], name
        assert name not in ms.__all__ or name in MEANT_AS_MODULES
    for name in ms.__all__:
        obj = getattr(ms, name)
        assert not isinstance(obj, types.ModuleType) or name in MEANT_AS_MODULES, name
    assert MEANT_AS_MODULES <= set(SUBMODULES)


def test_decode_is_the_byte_decoder():
    assert callable(ms.decode) and ms.decode is sys.modules["minispec.model"].decode
    assert ms.decode(ms.encode("h\xe9llo")) == "h\xe9llo" and ms.decode([0xFF]) == "\ufffd"
    assert not (ROOT / "minispec" / "decode.py").exists()


def test_public_names_exist_and_old_names_are_gone():
    assert set(ms.__all__) <= set(dir(ms))
    for name in ("load_drafter", "speculative_generate", "generate", "accept_prob", "residual", "verify_tree",
                 "ModelDrafter", "EarlyExitDrafter", "HeadDrafter", "Lookahead", "Stats"):
        assert name in ms.__all__, name
    gone = {"tree_generate", "self_speculative_generate", "ConfidenceDrafter", "MedusaDrafter", "load_medusa",
            "HYDRA_PATH", "bench", "train"}
    for mod in [ms] + modules():
        assert not gone & set(vars(mod)), (mod.__name__, gone & set(vars(mod)))


def test_stats_have_one_name_per_quantity():
    fields = [f.name for f in ms.Stats.__dataclass_fields__.values()]
    assert fields == ["tokens_per_call", "kept_fraction", "target_calls", "draft_calls", "drafted", "wall_time",
                      "tokens_per_second"]
    assert not hasattr(ms.Step, "accept_probs")


def _functions():
    """Every function and method defined in the package, with its qualified name."""
    for mod in modules():
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
                yield f"{mod.__name__}.{name}", inspect.unwrap(obj)  # (under torch.inference_mode's wrapper)
            elif inspect.isclass(obj) and obj.__module__ == mod.__name__:
                for attr, fn in vars(obj).items():
                    if inspect.isfunction(fn):
                        yield f"{mod.__name__}.{name}.{attr}", inspect.unwrap(fn)


RULES = {"verify_tree", "multi_draft_accept", "speculative_accept", "greedy_accept", "typical_accept"}


def test_exactly_one_speculative_loop():
    """Outside verify.py (which defines the rules), the only function that applies a verification rule is
    speculate.speculative_generate; and no other *_generate loop exists."""
    users = sorted(name for name, fn in _functions()
                   if RULES & set(fn.__code__.co_names) and not name.startswith("minispec.verify."))
    assert users == ["minispec.speculate.speculative_generate"]
    loops = sorted(name for name, _ in _functions() if name.split(".")[-1].endswith("generate"))
    assert loops == ["minispec.speculate.generate", "minispec.speculate.speculative_generate"]


def test_every_drafting_method_is_a_drafter():
    from minispec.drafters import Drafter
    classes = {name: obj for mod in modules() for name, obj in vars(mod).items()
               if inspect.isclass(obj) and name.endswith(("Drafter", "Lookahead")) and obj.__module__ == mod.__name__}
    assert {"ModelDrafter", "PromptLookupDrafter", "FallbackDrafter", "EarlyExitDrafter", "HeadDrafter",
            "Lookahead"} <= set(classes)
    for name, cls in classes.items():
        assert issubclass(cls, Drafter), name
        assert "draft" in vars(cls) or cls is Drafter, name
        assert not hasattr(cls, "propose") and not hasattr(cls, "rollback") and not hasattr(cls, "step"), name


def test_import_minispec_stays_light():
    code = "import sys, minispec; print(any(m in sys.modules for m in ('matplotlib', 'ipywidgets', 'transformers', 'scipy')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebooks_use_the_new_api_and_no_local_stdlib(path):
    """The notebooks read the shipped held-out text (minispec.data), never the local standard library, and
    call only the current API."""
    text = path.read_text()
    for old in ("sysconfig", "corpus_files", "minispec.train", "minispec.bench", "tree_generate(",
                "self_speculative_generate", "ConfidenceDrafter", "MedusaDrafter", "load_medusa", "acceptance_rate\\\"]"):
        assert old not in text, old
