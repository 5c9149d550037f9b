"""The methods beyond the core, one module each: the dependent drafters (survey section 2.1.2:
early exit, Medusa / Hydra heads, EAGLE), Jacobi / lookahead decoding, lookup with a cursor, as
a tree, with the answer's edits, with its draft length set by its match or priced by the cost
profile (`costs`, which the kit re-exports), the fallback of two drafters, the registry of every
shipped model and method (`load_model`, `load_drafter`), and Medusa's lossy rule."""
from .beam import BeamDrafter
from .copy_cursor import CopyCursorDrafter
from .eagle import EagleDrafter, EagleHead, load_eagle
from .early_exit import EarlyExitDrafter
from .edit_lookup import EditLookupDrafter
from .fallback import FallbackDrafter
from .heads import HeadDrafter, MedusaHeads, load_heads, medusa_tree
from .layer_skip import LayerSkipDrafter
from .lookahead import Lookahead
from .lookup_tree import LookupTreeDrafter
from .match_length import MatchLengthDrafter
from .priced import PricedDrafter
from .registry import load_drafter, load_model
from .streaming import StreamingDrafter
from .top_k import topk_accept
from .typical import typical_accept

__all__ = ["EagleDrafter", "EagleHead", "load_eagle", "EarlyExitDrafter", "FallbackDrafter",
           "HeadDrafter", "MedusaHeads", "load_heads", "medusa_tree", "Lookahead", "load_drafter",
           "load_model", "BeamDrafter", "CopyCursorDrafter", "topk_accept", "LayerSkipDrafter",
           "StreamingDrafter", "LookupTreeDrafter", "EditLookupDrafter",
           "MatchLengthDrafter", "PricedDrafter", "typical_accept"]
