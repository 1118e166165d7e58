"""The outlier numbers on the tensors Bondarenko et al. 2023 read them from, and the attention sinks on the windows
Gu et al. 2024 use, per architecture (degen-analyze's ``outliers``).

Bondarenko et al. (Qualcomm-AI-research/outlier-free-transformers) hook named modules and average, over the
evaluation's sequences, each sequence's kurtosis and ∞-norm of the module's tensor flattened to T·d values:

- ``validate_mlm.py`` (BERT, post-norm): per layer, the FFN output (``output.dense``), the output of
  LN(FFN output + residual) (``output.LayerNorm``) and, ∞-norm only, that LayerNorm's input: the residual sum, where
  the outliers live. Kurtosis: the mean over the FFN outputs and LayerNorm outputs (``avg_kurtosis``), its max.
- ``validate_clm.py`` (OPT, pre-norm): each decoder layer's output, ``fc2``, ``self_attn.out_proj``, both norms of
  the layer and the model's final norm; kurtosis and ∞-norm of every one. OPT's layer holds the FFN's tensors as
  (B·T, d), so ``fc2``'s and the FFN norm's numbers are per token row, averaged over tokens.

Ours map onto these roles: BERT and RoBERTa take BERT's; GPT-2, Llama, Qwen2 and ModernBERT (pre-norm) take OPT's
(``fc2`` = the MLP's output projection, ``out_proj`` = attention's, the layer's two norms, the final norm). A decoder's
last layer is read at its own output, before the final norm (HF's last ``hidden_states`` entry is after it).

The inputs are the released evaluations': fixed-length blocks of the text (BERT: 128 tokens with [CLS] and [SEP],
15% of the tokens masked with [MASK]; OPT: 512-token blocks, or the model's longest), not sentences one by one.
Attention sinks (Gu et al. 2024, sail-sg/Attention-Sink): the share of heads whose first-token importance exceeds
ε = 0.3 on windows of exactly 64 tokens, a decoder's opening with its BOS token; on shorter inputs a uniform head
counts as a sink (1/T > 0.3 for T ≤ 3).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from degen_train.metrics.outliers import (
    attention_entropy,
    attention_sink_rate,
    massive_activations,
    sequence_inf_norm,
    sequence_kurtosis,
)
from degen_train.models.attention_variants import EXPORTED_TYPE_PREFIX, variant_of

SINK_WINDOW = 64  # Gu et al.'s prompts: 64 tokens
BLOCKS = {"bert": 128, "opt": 512}  # validate_mlm.py --max_seq_length 128; validate_clm.py --block_size 512
MAX_BLOCKS = 64
TOKEN_ROW_ROLES = ("ffn_output", "ffn_norm_output")  # OPT's fc2 and final_layer_norm see (B·T, d)


@dataclass(frozen=True)
class Sites:
    """Where one architecture's tensors are, relative to its base model (``AutoModel``)."""

    protocol: str  # "bert" (validate_mlm.py's sites) or "opt" (validate_clm.py's)
    blocks: str  # the ModuleList of transformer layers
    ffn_output: str  # in a block: the MLP's output projection (BERT output.dense, OPT fc2)
    attention_output: str | None = None  # OPT out_proj
    residual_norm: str | None = None  # BERT: LN(FFN output + residual), whose input is the residual sum
    attention_norm: str | None = None  # OPT self_attn_layer_norm
    ffn_norm: str | None = None  # OPT (per layer) final_layer_norm
    final_norm: str | None = None  # OPT model.decoder.final_layer_norm


_BERT = Sites("bert", "encoder.layer", "output.dense", residual_norm="output.LayerNorm")
_LLAMA = Sites("opt", "layers", "mlp.down_proj", "self_attn.o_proj", attention_norm="input_layernorm",
               ffn_norm="post_attention_layernorm", final_norm="norm")  # fmt: skip
SITES = {
    "bert": _BERT,
    "roberta": _BERT,
    "gpt2": Sites("opt", "h", "mlp.c_proj", "attn.c_proj", attention_norm="ln_1", ffn_norm="ln_2", final_norm="ln_f"),
    "llama": _LLAMA,
    "qwen2": _LLAMA,
    "modernbert": Sites("opt", "layers", "mlp.Wo", "attn.Wo", attention_norm="attn_norm", ffn_norm="mlp_norm",
                        final_norm="final_norm"),  # fmt: skip
}


def sites_of(model: nn.Module) -> Sites:
    # An export with an attention variant declares degen_<arch>: the same blocks and names as the stock architecture.
    model_type = getattr(model.config, "model_type", "").removeprefix(EXPORTED_TYPE_PREFIX)
    if model_type not in SITES:
        raise ValueError(f"no outlier sites known for model_type={model_type!r}; known: {', '.join(sorted(SITES))}")
    return SITES[model_type]


def named_sites(model: nn.Module, sites: Sites) -> list[tuple[str, str, str]]:
    """(module name, role, tensor) for each tensor read: tensor is ``output``, or ``input`` for the residual sum."""
    layers = len(model.get_submodule(sites.blocks))
    found: list[tuple[str, str, str]] = []
    for j in range(layers):
        block = f"{sites.blocks}.{j}"
        if sites.protocol == "bert":
            found += [(f"{block}.{sites.ffn_output}", "ffn_output", "output"),
                      (f"{block}.{sites.residual_norm}", "norm_output", "output"),
                      (f"{block}.{sites.residual_norm}", "residual_sum", "input")]  # fmt: skip
        else:
            found += [(block, "block_output", "output"), (f"{block}.{sites.ffn_output}", "ffn_output", "output"),
                      (f"{block}.{sites.ffn_norm}", "ffn_norm_output", "output"),
                      (f"{block}.{sites.attention_output}", "attention_output", "output"),
                      (f"{block}.{sites.attention_norm}", "attention_norm_output", "output")]  # fmt: skip
    if sites.protocol == "opt" and sites.final_norm:
        found.append((sites.final_norm, "final_norm_output", "output"))
    return found


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (tuple, list)) and value else value


class _Reader:
    """Forward hooks that take each site's per-sequence kurtosis and ∞-norm, and each block's output."""

    def __init__(self, model: nn.Module, sites: Sites) -> None:
        self.sites = named_sites(model, sites)
        # OPT's decoder layer reshapes its hidden states to (B·T, d) before the FFN norm, fc1 and fc2
        # (transformers' modeling_opt.OPTDecoderLayer), so validate_clm.py's statistics of those two sites are per
        # token row; every other site's tensor is (B, T, d), its statistics per sequence.
        self.token_rows = {(name, tensor) for name, role, tensor in self.sites
                           if sites.protocol == "opt" and role in TOKEN_ROW_ROLES}  # fmt: skip
        self.values: dict[tuple[str, str], dict[str, list[Tensor]]] = {}
        self.block_outputs: list[Tensor | None] = [None] * len(model.get_submodule(sites.blocks))
        self.handles = []
        wanted: dict[str, list[str]] = {}
        for name, _, tensor in self.sites:
            wanted.setdefault(name, []).append(tensor)
        for name, tensors in wanted.items():
            self.handles.append(model.get_submodule(name).register_forward_hook(self._hook(name, tensors)))
        for j, block in enumerate(model.get_submodule(sites.blocks)):
            self.handles.append(block.register_forward_hook(self._block_hook(j)))

    def _hook(self, name: str, tensors: list[str]) -> Any:
        def hook(_module: nn.Module, inputs: Any, output: Any) -> None:
            for tensor in tensors:
                x = _first(inputs) if tensor == "input" else _first(output)
                x = x.detach().float()
                if (name, tensor) in self.token_rows:
                    x = x.reshape(-1, 1, x.size(-1))  # (B·T, 1, d): one row per token, as OPT's layer holds it
                entry = self.values.setdefault((name, tensor), {"kurtosis": [], "inf_norm": []})
                entry["kurtosis"].append(sequence_kurtosis(x).cpu())
                entry["inf_norm"].append(sequence_inf_norm(x).cpu())

        return hook

    def _block_hook(self, index: int) -> Any:
        def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
            self.block_outputs[index] = _first(output).detach().float().cpu()

        return hook

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


@contextmanager
def block_outputs(model: nn.Module) -> Iterator[list[Tensor | None]]:
    """Inside: each forward pass of ``model`` (an HF model or its base) fills the list with its transformer blocks'
    own outputs, on their device: a decoder's last one before the final norm."""
    base = getattr(model, "base_model", model)
    blocks = base.get_submodule(sites_of(base).blocks)
    outputs: list[Tensor | None] = [None] * len(blocks)

    def keep(index: int) -> Any:
        def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
            outputs[index] = _first(output).detach()

        return hook

    handles = [block.register_forward_hook(keep(j)) for j, block in enumerate(blocks)]
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


def released_blocks(tokenizer: Any, documents: list[str], protocol: str, longest: int) -> tuple[Tensor, str]:
    """The evaluation input of the protocol: (N, T) ids and a description of it."""
    from degen_train.metrics.w8a8_probe import masked_input, token_blocks

    length = min(BLOCKS[protocol], longest)
    encoder = protocol == "bert"
    inner = length - 2 if encoder else length
    blocks = token_blocks(tokenizer, documents, inner)[:MAX_BLOCKS]
    if not blocks:  # less text than one block: one block of all of it
        blocks = token_blocks(tokenizer, documents, 1)
        stream = [t for b in blocks for t in b]
        blocks = [stream[:inner]] if stream else []
    if not blocks:
        raise ValueError("the analysis text holds no tokens for the outlier measures")
    if encoder:
        ids = masked_input(tokenizer, blocks, seed=0)
        what = f"{len(blocks)} blocks of {ids.size(1)} tokens ([CLS] text [SEP], 15% of the tokens [MASK]ed)"
    else:
        ids = torch.tensor(blocks)
        what = f"{len(blocks)} blocks of {ids.size(1)} tokens of running text"
    return ids, what


def released_outliers(model: nn.Module, tokenizer: Any, documents: list[str], *, batch_size: int = 8) -> dict:
    """Kurtosis and ∞-norm per site (named by module, role and tensor), the released maxima and averages, and per
    block the output's numbers and massive activations (Sun et al.), on the protocol's blocks."""
    sites = sites_of(model)
    longest = int(getattr(model.config, "max_position_embeddings", 512) or 512)
    ids, what = released_blocks(tokenizer, documents, sites.protocol, longest)
    reader = _Reader(model, sites)
    device = next(model.parameters()).device
    layers: list[dict] = [{"kurtosis": [], "inf_norm": [], "massive_activations": 0, "massive_dims": set()}
                          for _ in reader.block_outputs]  # fmt: skip
    try:
        with torch.no_grad():
            for start in range(0, ids.size(0), batch_size):
                model(input_ids=ids[start : start + batch_size].to(device))
                for j, hidden in enumerate(reader.block_outputs):
                    layers[j]["kurtosis"].append(sequence_kurtosis(hidden))
                    layers[j]["inf_norm"].append(sequence_inf_norm(hidden))
                    for b in range(hidden.size(0)):
                        found = massive_activations(hidden[b : b + 1])
                        layers[j]["massive_activations"] += found["count"]
                        layers[j]["massive_dims"].update(found["dims"])
    finally:
        reader.close()
    per_site = {}
    for name, role, tensor in reader.sites:
        entry = reader.values[(name, tensor)]
        per_site[f"{name}:{tensor}"] = {"module": name, "tensor": tensor, "role": role,
                                        "kurtosis": float(torch.cat(entry["kurtosis"]).mean()),
                                        "inf_norm": float(torch.cat(entry["inf_norm"]).mean())}  # fmt: skip
    result: dict[str, Any] = {"protocol": sites.protocol, "input": what, "sites": per_site}
    result |= _headline(per_site, sites.protocol)
    result["layers"] = [{"kurtosis": float(torch.cat(layer["kurtosis"]).mean()),
                         "inf_norm": float(torch.cat(layer["inf_norm"]).mean()),
                         "massive_activations": layer["massive_activations"],
                         "massive_dims": sorted(layer["massive_dims"])} for layer in layers]  # fmt: skip
    result["massive_activations"] = sum(layer["massive_activations"] for layer in result["layers"])
    result["massive_dims"] = sorted({d for layer in result["layers"] for d in layer["massive_dims"]})
    return result


def _headline(per_site: dict[str, dict], protocol: str) -> dict[str, Any]:
    """The released summary numbers, each with the site it was taken at."""

    def top(key: str, entries: list[dict]) -> tuple[float, str]:
        best = max(entries, key=lambda e: e[key])
        return best[key], f"{best['module']} ({best['tensor']})"

    entries = list(per_site.values())
    if protocol == "bert":  # validate_mlm.py: kurtosis of the FFN and LayerNorm outputs; ∞-norms of all three
        kurtosis_entries = [e for e in entries if e["role"] in ("ffn_output", "norm_output")]
        result = {f"max_{name}_inf_norm": top("inf_norm", [e for e in entries if e["role"] == role])[0]
                  for name, role in (("ffn_out", "ffn_output"), ("LN_out", "norm_output"),
                                     ("LN_inp", "residual_sum"))}  # fmt: skip
    else:  # validate_clm.py: every site's kurtosis and ∞-norm
        kurtosis_entries = entries
        blocks = [e for e in entries if e["role"] == "block_output"]
        result = {"max_ffn_inf_norm": top("inf_norm", [e for e in entries if e["role"] == "ffn_output"])[0],
                  "max_layer_inf_norm": top("inf_norm", blocks)[0], "max_kurtosis_layers": top("kurtosis", blocks)[0]}
    result["max_kurtosis"], result["max_kurtosis_at"] = top("kurtosis", kurtosis_entries)
    result["avg_kurtosis"] = sum(e["kurtosis"] for e in kurtosis_entries) / len(kurtosis_entries)
    result["max_inf_norm"], result["max_inf_norm_at"] = top("inf_norm", entries)
    return result


def sinks_on_windows(model: nn.Module, tokenizer: Any, documents: list[str], *, limit: int = 256) -> dict[str, Any]:
    """Gu et al.'s sink rate (ε = 0.3) and each head's attention entropy on windows of exactly 64 tokens (encoders:
    [CLS] 62 tokens [SEP]); eager attention for this pass (attention maps: a variant's own, its clipped softmax, gates
    and key/value slot included), the model's own after."""
    from degen_train.metrics.w8a8_probe import _encoder_input, token_blocks

    encoder = sites_of(model).protocol == "bert" and tokenizer.cls_token_id is not None
    bos = None if encoder else getattr(tokenizer, "bos_token_id", None)
    # Gu et al.'s prompts start at the beginning of a sequence: a decoder's window opens with its BOS token when
    # the tokenizer has one (encoders: [CLS] 62 tokens [SEP]).
    windows = token_blocks(tokenizer, documents, SINK_WINDOW - (2 if encoder else 1 if bos is not None else 0))
    windows = windows[:limit]
    if not windows:
        return {"attention_sink_windows": 0, "attention_sink_note": f"the text holds fewer than {SINK_WINDOW} tokens"}
    if encoder:
        ids = _encoder_input(tokenizer, windows)
    else:
        ids = torch.tensor([[bos, *window] if bos is not None else window for window in windows])
    before = getattr(model.config, "_attn_implementation", None)
    device = next(model.parameters()).device
    rates, entropies = [], []
    model.set_attn_implementation("eager" if variant_of(model) == "softmax" else "degen_eager")  # its own maps
    try:
        with torch.no_grad():
            for start in range(0, ids.size(0), 16):
                maps = model(input_ids=ids[start : start + 16].to(device), output_attentions=True).attentions
                maps = [m.float().cpu() for m in maps]
                rates.append((attention_sink_rate(maps), maps[0].size(0)))
                entropies.append(torch.stack([attention_entropy(m) for m in maps]) * maps[0].size(0))
    finally:
        if before:
            model.set_attn_implementation(before)
    count = ids.size(0)
    per_head = (sum(entropies) / count).tolist()
    return {"attention_sink_rate": sum(rate * n for rate, n in rates) / count, "attention_sink_windows": count,
            "attention_entropy_per_head": per_head, "min_head_entropy": min(min(h) for h in per_head)}  # fmt: skip
