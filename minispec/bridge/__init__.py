"""The optional transformers bridge (`pip install minispec[hf]`): minispec.bridge.hf converts a GPT
to and from transformers' GPT2LMHeadModel and loads real GPT-2 checkpoints. transformers is
imported only inside its functions."""
