"""Tiny random configs of every causal LM architecture of the installed transformers, for the model
matrix (`seqpack.experiments.model_matrix`).

    cfg = tiny_config("qwen3_next")      # 32 wide, 4 layers: linear attention and full attention
    cls = causal_lm_class("qwen3_5")     # Qwen3_5ForCausalLM, built from the composite's text config

One generic set of keys (`_SET`: 32 wide, two heads, one key/value head, windows and chunks of
`WINDOW` tokens, four experts) fits most configs. Where it does not (a key the generic set misses,
a validator, a layout the family needs), `OVERRIDES` adds a few keys for that ``model_type``, each
with why. A composite config (text and another modality) is built through its text config and the
text model's causal LM class.

Every tiny config keeps each layer kind of its family within `_LAYERS` (or a few more) layers: a
hybrid keeps its linear attention, Mamba or convolution layers and its attention layers.
"""

from __future__ import annotations

from typing import Any

from seqpack.errors import UserError

#: sliding windows and chunks of the tiny configs: shorter than three of the matrix's documents
WINDOW = 8
#: token ids 0-2 are pad, bos and eos; the rest are drawn at random
VOCAB = 96

_SET: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "max_position_embeddings": 128,
    "n_positions": 128,
    "n_embd": 32,
    "n_head": 2,
    "n_inner": 64,
    "d_model": 32,
    "ffn_dim": 64,
    "n_ctx": 128,
    "num_heads": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_num_experts": 4,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "sliding_window": WINDOW,
    "attention_chunk_size": WINDOW,
    "sliding_window_size": WINDOW,
    "window_size": WINDOW,
    "local_window_size": WINDOW,
    "attention_dropout": 0.0,
    "hidden_dropout": 0.0,
    "attn_pdrop": 0.0,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "dropout": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "hidden_dropout_prob": 0.0,
    "q_lora_rank": 16,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 8,
    "tie_word_embeddings": False,
    "use_cache": False,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "mamba_d_state": 8,
    "mamba_n_heads": 4,
    "mamba_d_head": 16,
    "mamba_n_groups": 1,
    "mamba_expand": 2,
    "ssm_state_size": 8,
    "state_size": 8,
    "n_groups": 1,
    "expand": 2,
    "conv_kernel": 4,
    "linear_num_value_heads": 2,
    "linear_num_key_heads": 1,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_heads": 2,
    "linear_head_dim": 16,
    "num_experts_per_token": 2,
    "moe_k": 2,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "dff": 64,
    "dim_ff": 64,
    "dim_head": 16,
    "num_expert_group": 1,
    "rope_scaling": None,
}
#: hybrids whose default config names attention layers only: the kinds their modeling code also has
_HYBRID_KINDS: dict[str, list[str]] = {
    "lfm2": ["conv", "full_attention"],
    "lfm2_moe": ["conv", "full_attention"],
    "lfm3": ["conv", "sliding_attention", "full_attention"],
    "granitemoehybrid": ["linear_attention", "full_attention"],
}
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")
#: enough layers for two kinds twice (or three kinds), few enough to stay fast
_LAYERS = 4
_INKLING2 = {
    "unpadded_vocab_size": VOCAB,
    "swa_num_attention_heads": 2,
    "swa_num_key_value_heads": 1,
    "swa_head_dim": 16,
}
#: model_type -> keys on top of the generic ones, where those fail to build or stay too big (a
#: composite's text model reads its text model_type's entry, then its own)
OVERRIDES: dict[str, dict[str, Any]] = {
    # its default names a 1024-wide Mamba state whatever the width: derive it from the width instead
    "falcon_h1": {"mamba_d_ssm": None},
    # attention every 8th layer from the 4th, by default: every other one, so that 4 layers hold both
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 0},
    # no attention layer by default: two of the four
    "bamba": {"attn_layer_indices": [1, 3]},
    # 1 input, 2 looped and 1 output layer; to_dict() lists each layer's MLP as a kind of its own
    "dory": {
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        "n_input_layers": 1,
        "n_recurrent_layers": 2,
        "n_output_layers": 1,
    },
    # differential attention splits the values along key/value heads: two of them
    "diffllama": {"num_key_value_heads": 2},
    # top-1 routing only
    "zaya": {"num_experts_per_tok": 1},
    # rotary, key/value heads and the q/k/v clip (its forward clamps always) live in the attention sub-config; a small FFN of 4 experts, top-2
    "dbrx": {
        "n_heads": 2,
        "attn_config": {"kv_n_heads": 1, "rope_theta": 10000.0, "clip_qkv": 8.0},
        "ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2},
    },
    # 4 routed experts and 2 "zero" (identity) experts, top-2; its expert and dense MLP widths have their own keys
    "longcat_flash": {"zero_expert_num": 2, "moe_topk": 2, "expert_ffn_hidden_size": 32, "ffn_hidden_size": 64},
    # the sliding layers' heads and the unpadded vocabulary have their own keys
    "inkling2_text": _INKLING2,
    # the same, and layers 2-3 looped twice (the loop's ends fall on attention-residual blocks of 2)
    "inkling2_loop_text": {
        **_INKLING2,
        "n_layers_per_attn_res_block": 2,
        "loop_layer_index_start": 2,
        "loop_layer_index_end": 4,
        "loop_num_passes": 2,
        "loop_gate_rank": 8,
    },
    # query-sparse attention: a 16-token budget over blocks of 4 (shorter than the documents, so that
    # it selects); hyper-connections' low rank sized to the width
    "qwen4_exp_text": {
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 16,
        "indexer_budget": 16,
        "indexer_compress_ratio": 4,
        "hc_lowrank": 8,
    },
    # per-layer embeddings and LAuReL sized to the width; the last 2 of 4 layers share the first 2's
    # keys and values (one of each kind); activation sparsity on the first layer
    "gemma3n_text": {
        "vocab_size_per_layer_input": VOCAB,
        "hidden_size_per_layer_input": 8,
        "laurel_rank": 8,
        "num_kv_shared_layers": 2,
        "activation_sparsity_pattern": [0.95, 0.0, 0.0, 0.0],
    },
    # rotary parameters per layer kind (none by default): rotary sliding layers with M-RoPE sections
    # halving the 16-wide heads, and global layers without positions, as its checkpoints have them
    "cohere_compass_text": {
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]},
            "full_attention": None,
        },
    },
    # its width and heads have keys of their own
    "xlm": {"emb_dim": 32, "n_heads": 2},
    # the shape and pronunciation embeddings' vocabularies and widths (25k x 512 by default)
    "roc_bert": {
        "shape_vocab_size": 16,
        "shape_embed_dim": 8,
        "pronunciation_vocab_size": 16,
        "pronunciation_embed_dim": 8,
    },
    # the image encoder (a ViT-B by default)
    "git": {
        "vision_config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 16,
        }
    },
    # a decoder: local and LSH layers over chunks of `WINDOW`; the axial position embeddings' shape
    # multiplies to the maximum length and their widths add up to the width
    "reformer": {
        "is_decoder": True,
        "attention_head_size": 16,
        "feed_forward_size": 64,
        "axial_pos_shape": [8, 16],
        "axial_pos_embds_dim": [16, 16],
        "local_attn_chunk_length": WINDOW,
        "lsh_attn_chunk_length": WINDOW,
        "num_buckets": 4,
    },
    # the sliding layers' multi-head latent attention has keys of its own (64 heads of 1024 ranks by
    # default); the indexer's heads
    "dots3_note_text": {
        "swa_num_attention_heads": 2,
        "swa_num_key_value_heads": 2,
        "swa_q_lora_rank": 16,
        "swa_kv_lora_rank": 16,
        "swa_head_dim": 16,
        "swa_qk_nope_head_dim": 8,
        "swa_v_head_dim": 8,
        "index_head_dim": 16,
        "index_n_heads": 2,
    },
    # per-layer embeddings over the full vocabulary (256k x 256 by default); global layers' head_dim 512
    "gemma4_text": {"vocab_size_per_layer_input": VOCAB, "hidden_size_per_layer_input": 8, "global_head_dim": 32},
}


#: model_type -> why the matrix does not build it tiny on the CPU
NOT_BUILT: dict[str, str] = {
    "gemma4_assistant": "a draft model for speculative decoding: its layers read the keys and values of its target Gemma 4",
    "musicgen": "a text-to-audio decoder: each step predicts several audio codebooks (rows of codebooks x length)",
    "musicgen_melody": "a text-to-audio decoder: each step predicts several audio codebooks (rows of codebooks x length)",
    "xmod": "per-language adapters: every forward needs a language set on the model first (set_default_language)",
    "blt": "bytes through an entropy patcher, local encoder and decoder and a global transformer: its config has no "
    "single set of layer keys to shrink",
    "phi4_multimodal": "its text model's config carries the vision and audio encoders (870M parameters by default)",
}


def _retype(layer_types: list[str], n: int) -> list[str]:
    """``n`` layer kinds holding every kind of ``layer_types``, in its order, then cycling."""
    kinds = list(dict.fromkeys(layer_types))
    return [kinds[i % len(kinds)] for i in range(max(n, len(kinds)))]


def _default(cls: Any, model_type: str) -> Any:
    """The config class's defaults (with the overrides where the bare defaults fail validation)."""
    try:
        return cls()
    except Exception:  # noqa: BLE001 - a default a validator refuses: the overrides make it valid
        return cls(**OVERRIDES.get(model_type, {}))


def _target(model_type: str) -> tuple[Any, Any, list[str]]:
    """(config class, its defaults, the override keys in order) that the tiny model is built from:
    the text config of a composite one."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    base = _default(cls, model_type)
    if hasattr(base, "get_text_config") and base.get_text_config() is not base:
        text = base.get_text_config()
        return type(text), _default(type(text), text.model_type), [text.model_type, model_type]
    return cls, base, [model_type]


def causal_lm_class(model_type: str) -> Any:
    """The causal LM class the matrix builds for ``model_type``: transformers' own, or for a composite
    config the one taking its text config (the composite's entry when that takes the text config,
    else the text model_type's)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as names

    cls = getattr(transformers, names[model_type])
    config_cls, _, keys = _target(model_type)
    if len(keys) == 1 or issubclass(config_cls, cls.config_class):
        return cls
    if keys[0] in names:
        return getattr(transformers, names[keys[0]])
    raise UserError(f"a composite config whose text model ({keys[0]}) has no causal LM class")


def tiny_config(model_type: str) -> Any:
    """A tiny random config of ``model_type`` (see the module); raises where one cannot be made."""
    if model_type in NOT_BUILT:
        raise UserError(NOT_BUILT[model_type])
    cls, base, keys = _target(model_type)
    d = base.to_dict()
    kw = {k: v for k, v in _SET.items() if k in d}
    if "kv_lora_rank" in d:  # multi-head latent attention: rotary on qk_rope_head_dim, a key/value head per query head
        kw["head_dim"] = _SET["qk_rope_head_dim"]
        kw["num_key_value_heads"] = _SET["num_attention_heads"]
    if "rotary_dim" in d:
        kw["rotary_dim"] = 8
    if "mamba_n_heads" in d or d.get("model_type") == "mamba2":
        kw["num_heads"] = 4
    kinds_key = "layer_types" if "layer_types" in d else "layers_block_type"  # Zamba, Nemotron-H: the latter
    kinds = _HYBRID_KINDS.get(keys[0], d.get(kinds_key))
    n = _LAYERS
    if "use_sliding_window" in d:  # Qwen2: layer_types follow use_sliding_window and max_window_layers
        kw["use_sliding_window"] = True
        kw["max_window_layers"] = 2
    elif isinstance(kinds, list) and kinds and all(isinstance(x, str) for x in kinds):
        kw[kinds_key] = _retype(kinds, _LAYERS)
        n = len(kw[kinds_key])
    if isinstance(d.get("mlp_layer_types"), list) and d["mlp_layer_types"]:  # one MLP kind per layer, each kind kept
        kw["mlp_layer_types"] = _retype(d["mlp_layer_types"], n)
    for key in _LAYER_KEYS:
        if key in d:
            kw[key] = n
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if d.get(key) is not None:
            kw[key] = 1.0 if key == "attn_logit_softcapping" else 30.0  # a small cap, so that it matters
    if "attention_layers" in d:  # GPT-Neo: global and local layers
        kw["attention_types"] = [[["global", "local"], n // 2]]
    for key in keys:
        kw.update(OVERRIDES.get(key, {}))
    cfg = cls(**kw)
    if kinds_key in kw:  # some configs derive layer_types again from a pattern
        setattr(cfg, kinds_key, kw[kinds_key])
    return cfg


__all__ = ["NOT_BUILT", "OVERRIDES", "VOCAB", "WINDOW", "causal_lm_class", "tiny_config"]
