"""minispec GPT <-> transformers GPT2LMHeadModel, real GPT-2 checkpoints, and transformers'
LlamaForCausalLM -> minispec's Llama (minispec[hf]).

minispec's GPT is GPT-2 exactly, so conversion only renames keys and transposes the weights of
transformers' Conv1D layers (the same matrices, stored transposed). That gives two things:
  * a reference: the same weights in transformers give the same logits and the same greedy text,
    and `model.generate(..., assistant_model=...)` can be compared with speculative_generate;
  * real models: load_gpt2("gpt2-xl") puts OpenAI's weights into a minispec GPT, so the notebooks'
    code runs unchanged on them (gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2: one tokenizer).
transformers is imported inside the functions: the rest of minispec never needs it.
"""
from ..model import GPT, GPTConfig
from .llama import Llama, LlamaConfig

_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def to_hf_state_dict(model):
    """minispec GPT -> state dict for transformers.GPT2LMHeadModel (load with strict=False)."""
    state = {}
    for k, v in model.state_dict().items():
        name = k if k.startswith("lm_head") else "transformer." + k
        state[name] = v.t() if k.endswith(_CONV1D) else v
    return state


def from_hf_state_dict(state, config):
    """transformers.GPT2LMHeadModel state dict -> minispec GPT (the inverse of to_hf_state_dict)."""
    ours = {k.removeprefix("transformer."): v for k, v in state.items()
            if not k.endswith((".attn.bias", ".attn.masked_bias"))}  # HF's mask buffers
    ours = {k: v.t() if k.endswith(_CONV1D) else v for k, v in ours.items()}
    ours.setdefault("lm_head.weight", ours["wte.weight"])
    model = GPT(config)
    model.load_state_dict(ours)
    return model.eval()


def to_hf(model):
    """minispec GPT -> transformers GPT2LMHeadModel (eval mode, same weights).

    Example: to_hf(load_model("draft"))(torch.tensor([[1, 2]])).logits  # (1, 2, 256)
    """
    from transformers import GPT2Config, GPT2LMHeadModel
    if not isinstance(model, GPT):  # a Llama listed hundreds of missing GPT-2 keys
        raise ValueError(f"to_hf converts a minispec GPT, got a {type(model).__name__}")
    c = model.config
    config = GPT2Config(vocab_size=c.vocab_size, n_positions=c.block_size, n_embd=c.n_embd,
                        n_layer=c.n_layer, n_head=c.n_head, activation_function="gelu_new",
                        layer_norm_epsilon=1e-5, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None,
                        pad_token_id=None)
    hf = GPT2LMHeadModel(config).to(model.wte.weight.dtype)  # float64 stays float64
    missing, unexpected = hf.load_state_dict(to_hf_state_dict(model), strict=False)
    if [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias"))] or unexpected:
        raise ValueError(f"state dicts do not match: missing {missing}, unexpected {unexpected}")
    return hf.eval()


def from_hf(hf):
    """transformers GPT2LMHeadModel -> minispec GPT (eval mode, fp32, CPU); a LlamaForCausalLM
    -> minispec's Llama (from_hf_llama).

    Example: from_hf(to_hf(model)) has the weights of model.
    """
    kind = getattr(getattr(hf, "config", None), "model_type", None)  # None: not transformers'
    if kind not in ("gpt2", "llama"):
        raise ValueError(f"only GPT-2 and Llama models convert, got {type(hf).__name__} "
                         f"(model_type={kind!r})")
    if not hasattr(hf, "lm_head"):  # GPT2Model, LlamaModel: the blocks without the head
        raise ValueError(f"a {type(hf).__name__} has no language-model head: load it with "
                         "AutoModelForCausalLM (GPT2LMHeadModel, LlamaForCausalLM)")
    if kind == "llama":
        return from_hf_llama(hf)
    c = hf.config
    ours = [("activation_function", "gelu_new"), ("layer_norm_epsilon", 1e-5), ("n_inner", None),
            ("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
            ("tie_word_embeddings", True),  # minispec's GPT has one matrix for wte and lm_head
            ("add_cross_attention", False)]
    odd = {k: getattr(c, k) for k, ok in ours if getattr(c, k) != ok}
    if odd.get("n_inner") == 4 * c.n_embd:  # the width None stands for, given explicitly
        del odd["n_inner"]
    if odd:
        raise ValueError(f"this GPT-2 variant differs from minispec's architecture: {odd}")
    config = GPTConfig(vocab_size=c.vocab_size, block_size=c.n_positions, n_layer=c.n_layer,
                       n_head=c.n_head, n_embd=c.n_embd)
    state = {k: v.float().cpu() for k, v in hf.state_dict().items()}
    return from_hf_state_dict(state, config)


LLAMA_NAMES = {"model.embed_tokens.": "wte.", "model.layers.": "h.", "model.norm.": "ln_f."}


def from_hf_llama(hf):
    """transformers' LlamaForCausalLM -> minispec's Llama (bridge.llama) in eval mode, the same
    weights and dtype: only the names change. A ValueError names what that Llama does not build
    (RoPE scaling, biases, another activation or head size, an untied head)."""
    c = hf.config
    rope = getattr(c, "rope_parameters", None)  # transformers 5; 4.x: rope_theta, rope_scaling
    rope = rope or {"rope_theta": c.rope_theta, **(getattr(c, "rope_scaling", None) or {})}
    ours = [("hidden_act", "silu"), ("tie_word_embeddings", True), ("attention_bias", False),
            ("mlp_bias", False), ("head_dim", c.hidden_size // c.num_attention_heads)]
    odd = {k: getattr(c, k) for k, ok in ours if getattr(c, k, None) not in (ok, None)}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        odd["rope_parameters"] = rope
    if odd:
        raise ValueError(f"this Llama variant differs from minispec's architecture: {odd}")
    config = LlamaConfig(c.vocab_size, c.max_position_embeddings, c.num_hidden_layers,
                         c.num_attention_heads, c.num_key_value_heads, c.hidden_size,
                         c.intermediate_size, float(rope["rope_theta"]), c.rms_norm_eps)
    state = {}
    for name, w in hf.state_dict().items():
        for theirs, mine in LLAMA_NAMES.items():
            name = name.replace(theirs, mine) if name.startswith(theirs) else name
        state[name] = w
    state.setdefault("lm_head.weight", state["wte.weight"])
    model = Llama(config).to(hf.dtype)
    model.load_state_dict(state)
    return model.eval()


def load_gpt2(name="gpt2"):
    """Download a GPT-2 checkpoint (needs internet) -> (minispec GPT, encode, decode).

    encode: text -> list[int] and decode: list[int] -> text use GPT-2's BPE tokenizer, replacing
    minispec.encode / decode (bytes) for these models.
    Example: target, encode, decode = load_gpt2("gpt2-xl")
    """
    from transformers import AutoTokenizer, GPT2LMHeadModel
    tokenizer = AutoTokenizer.from_pretrained(name)
    model = from_hf(GPT2LMHeadModel.from_pretrained(name))
    return model, tokenizer.encode, tokenizer.decode
