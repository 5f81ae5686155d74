"""Hugging Face transformers models (Llama, Mistral, Qwen2) on tilec's ops:

    from tilec.integrations import transformers as tt
    model = LlamaForCausalLM(config).cuda().bfloat16()
    tt.apply(model)                  # in place; returns what it patched

- every `*RMSNorm` module's forward -> tilec::rms_norm (weight and variance_epsilon kept);
- every `*MLP` with gate_proj / up_proj / down_proj and a silu activation -> tilec::swiglu;
- rotary embeddings: the modeling module's `apply_rotary_pos_emb` -> tilec::rope (tables
  shared by the batch; per-row positions, as with left padding, keep the original);
- attention: an implementation "tilec" (registered with transformers' AttentionInterface,
  masks as sdpa's) running tilec::attention where sdpa would run a causal kernel with no
  mask, and sdpa itself otherwise (a padding mask, dropout, a KV cache, a sliding window);
- the causal-LM loss: `model.forward` with labels, in training, computes the shifted
  cross-entropy by tilec::linear_cross_entropy from the last hidden states and lm_head's
  weight (no logits; `logits` is None then), as transformers' ForCausalLMLoss
  (num_items_in_batch: the sum divided by it).

The rotary patch replaces a function of the model type's modeling module, so it holds for
every model of that type in the process (as Liger-Kernel's patches do); the others change
`model` only. Needs torch and transformers (`pip install tilec[transformers]`).
"""
from __future__ import annotations

import importlib
import types
from typing import Dict

import torch

from tilec.stdlib_kernels import torch_ops as T

__all__ = ["apply", "SUPPORTED", "attention_forward"]

SUPPORTED = ("llama", "mistral", "qwen2")
_SILU = ("silu", "swish")


def _rms_norm_forward(self, hidden_states):
    return T.rms_norm(hidden_states, self.weight, self.variance_epsilon)


def _mlp_forward(self, x):
    return self.down_proj(T.swiglu(self.gate_proj(x), self.up_proj(x)))


def _as_bshd(x):
    """x (batch, heads, seq, dim) as the (batch, seq, heads, dim) tensor the kernels take (a
    transposed view when x is one of a contiguous bshd tensor, as transformers' projections
    give; else a copy) and whether that was a view."""
    t = x.transpose(1, 2)
    return (t, True) if t.is_contiguous() else (t.contiguous(), False)


def _rotary(original):
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        unsqueeze_dim = kwargs.get("unsqueeze_dim", args[-1] if args else 1)
        # tilec::rope takes one (seq, dim / 2) table for the whole batch, of halves that repeat
        if cos.dim() != 3 or cos.shape[0] != 1 or unsqueeze_dim != 1 or q.dim() != 4:
            return original(q, k, cos, sin, *args, **kwargs)
        half = cos.shape[-1] // 2
        c, s = cos[0, :, :half], sin[0, :, :half]
        out = []
        for x in (q, k):
            xs, _ = _as_bshd(x)
            out.append(T.rope(xs, c, s, seq_dim=1).transpose(1, 2))
        return tuple(out)
    apply_rotary_pos_emb.__tilec_original__ = original
    return apply_rotary_pos_emb


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                      **kwargs):
    """transformers' attention interface ((batch, heads, seq, dim) in, (batch, seq, heads, dim)
    out): tilec::attention for unmasked causal self-attention, sdpa for the rest."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: PLC0415
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    window = kwargs.get("sliding_window")
    n_q, n_k = query.shape[2], key.shape[2]
    if (attention_mask is not None or dropout or not causal or n_q != n_k or kwargs.get("output_attentions")
            or (window is not None and window < n_k) or kwargs.get("softcap") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    q, k, v = (_as_bshd(x)[0] for x in (query, key, value))
    return T.attention(q, k, v, causal=True, scale=scaling), None


def _causal_lm_forward(original):
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, labels=None,
                **kwargs):
        if labels is None or not (self.training and torch.is_grad_enabled()):
            return original(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            inputs_embeds=inputs_embeds, labels=labels, **kwargs)
        from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: PLC0415
        kwargs.pop("logits_to_keep", None)
        shift_labels = kwargs.pop("shift_labels", None)
        n_items = kwargs.get("num_items_in_batch")
        ignore_index = kwargs.pop("ignore_index", -100)
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             inputs_embeds=inputs_embeds, **kwargs)
        hidden = outputs.last_hidden_state
        if shift_labels is None:   # token t predicts label t + 1; the last predicts nothing
            shift_labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
        shift_labels = shift_labels.to(hidden.device).contiguous()
        head = self.lm_head
        weight = head.weight if head.weight.dtype == hidden.dtype else head.weight.to(hidden.dtype)
        reduction = "sum" if n_items is not None else "mean"
        loss = T.linear_cross_entropy(hidden, weight, shift_labels, head.bias, ignore_index, reduction)
        if n_items is not None:
            loss = loss / n_items
        return CausalLMOutputWithPast(loss=loss, logits=None, hidden_states=outputs.hidden_states,
                                      attentions=outputs.attentions)
    forward.__tilec_original__ = original
    return forward


def _register_attention() -> bool:
    try:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask  # noqa: PLC0415
        from transformers.modeling_utils import AttentionInterface  # noqa: PLC0415
    except ImportError:   # transformers before the attention interface (4.48)
        return False
    AttentionInterface.register("tilec", attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register("tilec", sdpa_mask)
    return True


def _set_attention(model) -> bool:
    if not _register_attention():
        return False
    setter = getattr(model, "set_attn_implementation", None)
    if setter is not None:
        try:
            setter("tilec")
            return True
        except (ValueError, TypeError, KeyError):
            pass
    for m in model.modules():   # older versions: the config attribute the attention reads
        cfg = getattr(m, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            cfg._attn_implementation = "tilec"
    return True


def apply(model, *, rms_norm: bool = True, mlp: bool = True, rope: bool = True, attention: bool = True,
          loss: bool = True) -> Dict[str, int]:
    """Patch a Hugging Face Llama / Mistral / Qwen2 model (a `*ForCausalLM` or its base model)
    in place onto tilec's ops (module doc); returns how many modules or functions each part
    patched. A model of another type is a ValueError; calling apply twice patches nothing more."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED:
        raise ValueError(f"model: tilec patches {', '.join(SUPPORTED)} models, got model_type {model_type!r}")
    done = {"rms_norm": 0, "mlp": 0, "rope": 0, "attention": 0, "loss": 0}
    act = getattr(config, "hidden_act", "silu")
    for m in model.modules():
        name = type(m).__name__
        if rms_norm and name.endswith("RMSNorm") and hasattr(m, "variance_epsilon") and "forward" not in vars(m):
            m.forward = types.MethodType(_rms_norm_forward, m)
            done["rms_norm"] += 1
        elif (mlp and name.endswith("MLP") and act in _SILU and "forward" not in vars(m)
              and all(hasattr(m, p) for p in ("gate_proj", "up_proj", "down_proj"))):
            m.forward = types.MethodType(_mlp_forward, m)
            done["mlp"] += 1
    if rope:
        mod = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
        fn = getattr(mod, "apply_rotary_pos_emb", None)
        if fn is not None and not hasattr(fn, "__tilec_original__"):
            mod.apply_rotary_pos_emb = _rotary(fn)
            done["rope"] = 1
    if attention and _set_attention(model):
        done["attention"] = 1
    if loss and hasattr(model, "lm_head") and hasattr(model, "model") and "forward" not in vars(model):
        model.forward = types.MethodType(_causal_lm_forward(model.forward), model)
        done["loss"] = 1
    return done
