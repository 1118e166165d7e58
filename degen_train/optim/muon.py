"""``optimizer=muon``: torch's Muon for the hidden matrices, AdamW for everything else, as one torch optimizer.

Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks") replaces each update of a
2-D weight by the orthogonalised (Newton–Schulz) Nesterov momentum: W ← W·(1 − ηλ) − η·s·NS₅(g + μB), B ← μB + g.
Its authors' grouping rule (KellerJordan/Muon README, "MuonWithAuxAdam"): Muon takes the ≥2-D weights of the
network's body, AdamW the embeddings, the output layer and heads, and every gain and bias. Here the body is the
repeated transformer blocks (every ``nn.ModuleList`` of layers, the generator's too), so the word, position and
type embeddings, the LM head, BERT's pooler and the objectives' heads (NSP, ELECTRA's discriminator head, SimCSE's
MLP) all stay on AdamW, with BERT's decay rule (no decay on biases and norms).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from degen_train.optim.optimizer import parameter_groups

log = logging.getLogger("degen_train")


def hidden_matrices(modules: Iterable[nn.Module]) -> list[tuple[nn.Module, nn.Parameter]]:
    """(owning module, weight) for every trainable 2-D weight inside a repeated block (an ``nn.ModuleList``'s
    children) that is not an embedding nor tied to one; in model order, each parameter once."""
    modules = list(modules)
    embeddings = [sub for module in modules for sub in module.modules() if isinstance(sub, nn.Embedding)]
    embedded = {id(p) for sub in embeddings for p in sub.parameters()}
    found: list[tuple[nn.Module, nn.Parameter]] = []
    seen: set[int] = set()
    for module in modules:
        for block_list in (sub for sub in module.modules() if isinstance(sub, nn.ModuleList)):
            for sub in block_list.modules():
                for param in sub.parameters(recurse=False):
                    if param.ndim != 2 or not param.requires_grad or id(param) in seen or id(param) in embedded:
                        continue
                    seen.add(id(param))
                    found.append((sub, param))
    return found


def _lr_scale(owner: nn.Module, param: nn.Parameter, adjust_lr: str) -> float:
    """GPT-2's ``Conv1D`` stores its weight as (in, out), the transpose of ``nn.Linear``'s (out, in). Newton–Schulz
    does not care, but torch's ``original`` rate adjustment √max(1, rows/cols) reads the shape: this factor makes
    a Conv1D weight step exactly as the same layer written as ``nn.Linear`` would (1 for every other weight)."""
    from transformers.pytorch_utils import Conv1D

    if adjust_lr != "original" or not isinstance(owner, Conv1D):
        return 1.0
    stored_rows, stored_cols = param.shape
    as_linear = math.sqrt(max(1.0, stored_cols / stored_rows))  # nn.Linear's rows are Conv1D's columns
    as_stored = math.sqrt(max(1.0, stored_rows / stored_cols))
    return as_linear / as_stored


def newton_schulz(update: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float) -> Tensor:
    """X ← aX + (bA + cA²)X with A = XXᵀ, from X₀ = G/‖G‖_F on the wide orientation: the quintic iteration of
    Jordan et al. 2024 that drives every singular value of G towards 1, in ``update``'s own dtype."""
    a, b, c = coefficients
    wide = update.T if update.size(0) > update.size(1) else update
    x = wide / wide.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if update.size(0) > update.size(1) else x


class Float32Muon(torch.optim.Muon):
    """torch's Muon with the Newton–Schulz iteration in float32 instead of its bfloat16 (``muon_ns_dtype=float32``):
    the same update, rounded like the rest of a float32 run, so a run split over processes stays within float32
    rounding of one process (bfloat16 turns float32-sized gradient differences into bfloat16-sized ones)."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        from torch.optim._muon import _adjust_lr  # torch's own rate rule, shared with its bfloat16 path

        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params: list[Tensor] = []
            grads: list[Tensor] = []
            buffers: list[Tensor] = []
            self._init_group(group, params, grads, buffers)
            momentum, lr = group["momentum"], group["lr"]
            for param, grad, buffer in zip(params, grads, buffers, strict=True):
                buffer.lerp_(grad, 1 - momentum)  # B ← μB + (1 − μ)g, as torch's
                update = grad.lerp(buffer, momentum) if group["nesterov"] else buffer
                update = newton_schulz(update.float(), group["ns_coefficients"], group["ns_steps"], group["eps"])
                param.mul_(1 - lr * group["weight_decay"])
                param.add_(update.to(param.dtype), alpha=-_adjust_lr(lr, group["adjust_lr_fn"], param.shape))
        return loss


class MuonWithAdamW(torch.optim.Optimizer):
    """One optimizer over two: ``torch.optim.Muon`` on the hidden matrices, ``torch.optim.AdamW`` on the rest.

    Both inner optimizers share this one's parameter groups and state, so the learning-rate scheduler, gradient
    clipping, checkpoints (torch's own ``state_dict`` layout, which torch.distributed.checkpoint reads) and the
    divergence guard see one ordinary optimizer; each group carries ``algorithm`` ("muon" or "adamw")."""

    def __init__(self, muon: torch.optim.Muon, adamw: torch.optim.AdamW) -> None:
        self.muon, self.adamw = muon, adamw
        for group in muon.param_groups:
            group["algorithm"] = "muon"
        for group in adamw.param_groups:
            group["algorithm"] = "adamw"
        super().__init__(muon.param_groups + adamw.param_groups, defaults={})
        self._share()

    def _share(self) -> None:
        """Point the inner optimizers at this one's groups and state (again after ``load_state_dict``, which
        replaces both objects)."""
        self.muon.param_groups = [g for g in self.param_groups if g["algorithm"] == "muon"]
        self.adamw.param_groups = [g for g in self.param_groups if g["algorithm"] == "adamw"]
        self.muon.state = self.adamw.state = self.state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._share()

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss


def build_muon(
    modules: Iterable[nn.Module],
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    fused: bool | None = None,
    muon_lr: float = 0.02,
    muon_weight_decay: float = 0.01,
    muon_momentum: float = 0.95,
    muon_nesterov: bool = True,
    muon_ns_steps: int = 5,
    muon_ns_coefficients: tuple[float, float, float] = (3.4445, -4.7750, 2.0315),
    muon_adjust_lr: str = "original",
    muon_ns_dtype: str = "bfloat16",
) -> MuonWithAdamW:
    """Muon on :func:`hidden_matrices` (``muon_*`` keys), AdamW with ``lr``/``weight_decay``/``betas``/``eps`` on
    the rest. Defaults are the KellerJordan/Muon README's: Muon lr 0.02, weight decay 0.01, momentum 0.95, Nesterov,
    5 Newton–Schulz steps with (3.4445, −4.7750, 2.0315); ``muon_adjust_lr=match_rms_adamw`` is Moonlight's
    0.2·√max(rows, cols) scaling (Liu et al. 2025), under which Muon may reuse AdamW's rate and decay.
    ``muon_ns_dtype``: bfloat16 is torch's (and the authors') Newton–Schulz; float32 is :class:`Float32Muon`."""
    # the rates, choices and ranges: checked by its section (section.py: OptimizerConfig)
    modules = list(modules)
    hidden = hidden_matrices(modules)
    if not hidden:
        raise ValueError(
            "optimizer=muon found no hidden matrices (2-D weights inside repeated transformer blocks) to give Muon: "
            "use optimizer=adamw for this model"
        )
    by_scale: dict[float, list[nn.Parameter]] = {}
    for owner, param in hidden:
        by_scale.setdefault(_lr_scale(owner, param, muon_adjust_lr), []).append(param)
    # A Conv1D group's rate is scaled by s and its decay by 1/s, so the decoupled decay η·λ is the Linear layer's.
    muon_groups = [
        {"params": params, "lr": muon_lr * scale, "weight_decay": muon_weight_decay / scale}
        for scale, params in by_scale.items()
    ]
    muon_class = Float32Muon if muon_ns_dtype == "float32" else torch.optim.Muon
    muon = muon_class(
        muon_groups,
        lr=muon_lr,
        weight_decay=muon_weight_decay,
        momentum=muon_momentum,
        nesterov=muon_nesterov,
        ns_coefficients=tuple(muon_ns_coefficients),
        ns_steps=muon_ns_steps,
        adjust_lr_fn=muon_adjust_lr,
    )
    taken = {id(p) for _, p in hidden}
    rest = [
        {**group, "params": [p for p in group["params"] if id(p) not in taken]}
        for group in parameter_groups(modules, weight_decay)
    ]
    adamw = torch.optim.AdamW(rest, lr=lr, betas=tuple(betas), eps=eps, fused=fused)
    log.info("optimizer=muon: %s", muon_split(modules, taken))
    return MuonWithAdamW(muon, adamw)


def muon_split(modules: list[nn.Module], muon_ids: set[int]) -> str:
    """Which parameters Muon takes and which AdamW, by name pattern (block numbers folded to N) and count."""
    names = {id(p): n for module in modules for n, p in module.named_parameters()}
    groups: dict[str, dict[str, int]] = {"Muon": {}, "AdamW": {}}
    for module in modules:
        for param in module.parameters():
            if not param.requires_grad or id(param) not in names:
                continue
            pattern = re.sub(r"\.\d+\.", ".N.", names.pop(id(param)))
            side = groups["Muon" if id(param) in muon_ids else "AdamW"]
            side[pattern] = side.get(pattern, 0) + param.numel()
    parts = []
    for side, patterns in groups.items():
        total = sum(patterns.values())
        shown = ", ".join(sorted(patterns)[:6]) + (f", … ({len(patterns)} kinds)" if len(patterns) > 6 else "")
        parts.append(f"{side} {total / 1e6:.2f}M parameters ({shown})")
    return "; ".join(parts)
