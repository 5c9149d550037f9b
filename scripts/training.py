"""What training needs and decoding does not: saving weights, and, from the notebook kit
(minispec/kit/training.py, where the notebooks run and show them), random windows of the corpus,
the target's features, every exit's logits, the losses of the early-exit target, of the Medusa /
Hydra heads and of EAGLE's head, and on-policy distillation's rollouts and divergences. Used by
train.py, train_heads.py, train_eagle.py, distill_onpolicy.py and eagle3_experiment.py.
"""
import torch

from minispec.kit.training import (divergence, draft_rollouts, eagle_loss, early_exit_loss,
                                   exit_logits, get_batch, hidden_states, medusa_loss, unroll)

__all__ = ["save_model", "get_batch", "hidden_states", "exit_logits", "early_exit_loss", "unroll",
           "medusa_loss", "eagle_loss", "draft_rollouts", "divergence"]


def save_model(model, path, **card):
    """Store weights in fp16 together with the config (and any notes for the model card)."""
    state = {k: v.half() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    torch.save({"config": vars(model.config), "state_dict": state, "card": card}, path)
