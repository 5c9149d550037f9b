"""The public API's shape: names that explain themselves, no name shadowing a submodule, ONE
speculative loop (and its batched form).

The contract: `ms.decode` is the byte decoder, no public name shadows a submodule (of the package
or of its subpackages methods/, batch/, kit/, bridge/), and `speculative_generate` is the only
decoding loop for a prompt besides `generate`: every drafting method is a Drafter of it, and no
other function of the package applies a verification rule, except the batched form of the same
loop (minispec.batch.loop, where a list of prompts goes).
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
SUBMODULES = sorted(m.name for m in pkgutil.walk_packages(ms.__path__, "minispec.")
                    if not m.name.endswith("__main__"))  # every level: minispec.methods.heads too
# exposed as modules on purpose: ms.viz.plot_pq(...), ms.data.prompts(), ms.batch.feed, ms.tree.Tree
MEANT_AS_MODULES = {"viz", "data", "batch", "theory", "tree", "verify"}


def modules():
    return [importlib.import_module(name) for name in SUBMODULES]


def test_every_submodule_imports():
    assert {"minispec.methods.heads", "minispec.batch.ragged", "minispec.kit.viz",
            "minispec.bridge.hf"} <= set(SUBMODULES)
    for name in SUBMODULES:
        mod = importlib.import_module(name)
        assert mod.__name__ == name
    import minispec.speculate
    assert minispec.speculate.speculative_generate is ms.speculative_generate


def test_no_public_name_shadows_a_submodule():
    """`P.X` is the submodule X whenever P/X.py (or the package P/X/) exists, for the package and
    each subpackage P (importing it cannot rebind a function of that name), and the public names
    (__all__) are functions and classes, not modules (but for the few meant as modules)."""
    for name in SUBMODULES:
        parent, _, leaf = name.rpartition(".")
        assert getattr(sys.modules[parent], leaf) is sys.modules[name], name
        assert parent != "minispec" or leaf not in ms.__all__ or leaf in MEANT_AS_MODULES
    for mod in [ms] + modules():
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            meant = mod.__name__ == "minispec" and name in MEANT_AS_MODULES
            meant = meant or mod.__name__ == "minispec.kit"  # the kit exports its modules
            assert not isinstance(obj, types.ModuleType) or meant, (mod.__name__, name)
    assert all(isinstance(getattr(ms, name), types.ModuleType) for name in MEANT_AS_MODULES)


def test_decode_is_the_byte_decoder():
    assert callable(ms.decode) and ms.decode is sys.modules["minispec.model"].decode
    assert ms.decode(ms.encode("h\xe9llo")) == "h\xe9llo" and ms.decode([0xFF]) == "\ufffd"
    assert not (ROOT / "minispec" / "decode.py").exists()


def test_public_names_exist_and_old_names_are_gone():
    assert set(ms.__all__) <= set(dir(ms))
    for name in ("load_drafter", "speculative_generate", "generate", "accept_prob", "residual",
                 "verify_tree", "ModelDrafter", "EarlyExitDrafter", "HeadDrafter", "Lookahead",
                 "Stats", "FallbackDrafter", "MedusaHeads", "load_heads"):
        assert name in ms.__all__, name
    gone = {"tree_generate", "self_speculative_generate", "ConfidenceDrafter", "MedusaDrafter",
            "load_medusa", "HYDRA_PATH", "bench", "train", "save_model",
            "score_trees", "hidden_states", "medusa_loss", "early_exit_loss", "get_batch", "rows",
            "draft_rows", "score_rows", "accept_rows"}
    training = {"hidden_states", "medusa_loss", "early_exit_loss", "get_batch"}
    for mod in [ms] + modules():  # the training pieces notebooks run ship in the kit, nowhere else
        names = gone - training if mod.__name__ == "minispec.kit.training" else gone
        assert not names & set(vars(mod)), (mod.__name__, names & set(vars(mod)))
    assert not training & set(vars(ms))
    assert not hasattr(ms, "selfspec") and not hasattr(ms, "eagle")  # now minispec.methods.*
    for old in ("selfspec", "eagle", "viz", "data"):  # moved into methods/ and kit/
        assert not (ROOT / "minispec" / f"{old}.py").exists(), old
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("minispec.selfspec")
    assert not hasattr(ms.Step, "drafted") and not hasattr(ms.KVCache(ms.GPTConfig()), "lengths")
    assert not hasattr(ms.MedusaHeads, "unroll")


def test_stats_have_one_name_per_quantity():
    fields = [f.name for f in ms.Stats.__dataclass_fields__.values()]
    assert fields == ["tokens_per_call", "kept_fraction", "target_calls", "draft_calls", "drafted",
                      "wall_time", "tokens_per_second"]
    assert not hasattr(ms.Step, "accept_probs")


def _functions():
    """Every function and method defined in the package, with its qualified name."""
    for mod in modules():
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
                # (unwrapped: under torch.inference_mode's wrapper)
                yield f"{mod.__name__}.{name}", inspect.unwrap(obj)
            elif inspect.isclass(obj) and obj.__module__ == mod.__name__:
                for attr, fn in vars(obj).items():
                    if inspect.isfunction(fn):
                        yield f"{mod.__name__}.{name}.{attr}", inspect.unwrap(fn)


RULES = {"verify_tree", "multi_draft_accept", "speculative_accept", "greedy_accept",
         "typical_accept"}


def test_exactly_one_speculative_loop():
    """Outside verify.py (which defines the rules), the only functions that apply a verification
    rule are speculate.speculative_generate and its batched form (batch.loop, for a list of
    prompts); and no other *_generate loop exists, in any subpackage."""
    users = sorted(name for name, fn in _functions()
                   if RULES & set(fn.__code__.co_names) and not name.startswith("minispec.verify."))
    assert users == ["minispec.batch.loop.speculative_generate_batch",
                     "minispec.speculate.speculative_generate"]
    loops = sorted(name for name, _ in _functions()
                   if name.split(".")[-1].endswith(("generate", "generate_batch")))
    assert loops == ["minispec.batch.loop.generate_batch",
                     "minispec.batch.loop.speculative_generate_batch",
                     "minispec.speculate.generate", "minispec.speculate.speculative_generate"]


def test_every_drafting_method_is_a_drafter():
    from minispec.drafters import Drafter
    classes = {name: obj for mod in modules() for name, obj in vars(mod).items()
               if inspect.isclass(obj) and name.endswith(("Drafter", "Lookahead"))
               and obj.__module__ == mod.__name__}
    assert {"ModelDrafter", "PromptLookupDrafter", "FallbackDrafter", "EarlyExitDrafter",
            "HeadDrafter", "EagleDrafter", "Lookahead"} <= set(classes)
    for name, cls in classes.items():
        assert issubclass(cls, Drafter), name
        assert "draft" in vars(cls) or cls is Drafter, name
        assert not any(hasattr(cls, old) for old in ("propose", "rollback", "step", "draft_rows",
                                                     "score_rows", "accept_rows")), name


def test_import_minispec_stays_light():
    code = ("import sys, minispec; print(any(m in sys.modules for m in "
            "('matplotlib', 'ipywidgets', 'transformers', 'scipy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebooks_use_the_new_api_and_no_local_stdlib(path):
    """The notebooks read the shipped held-out text (minispec.data), never the local standard
    library, and call only the current API (none of the names the layout change removed)."""
    text = path.read_text()
    for old in ("sysconfig", "corpus_files", "minispec.train", "minispec.bench", "tree_generate(",
                "self_speculative_generate", "ConfidenceDrafter", "MedusaDrafter", "load_medusa",
                "acceptance_rate\\\"]", "minispec.selfspec", "minispec.eagle",
                "from minispec.data ", "score_trees", "draft_rows", "score_rows", "accept_rows",
                "all_exits"):
        assert old not in text, old
