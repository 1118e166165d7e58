"""What the safety nets cost: the divergence guard per step, and atomic sidecar-verified checkpoint writes.

Side by side in one process, configurations taking turns: mini encoder, MLM, batch 32 x 128, fp32.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from lightning.fabric.plugins.io import TorchCheckpointIO

from bench.common import corpus_overrides, interleaved, save
from bench.spine import batches
from degen_train.callbacks.divergence import DivergenceGuard
from degen_train.config import load_config
from degen_train.losses.catalog import build_terms, data_format_for
from degen_train.losses.contract import WeightedSum
from degen_train.models.backbone import Backbone, build_hf_model
from degen_train.optim.optimizer import build_optimizer
from degen_train.storage.checkpoints import save_checkpoint_file


class _ModuleShim:
    """The two things the guard asks of the LightningModule."""

    def __init__(self) -> None:
        self.pending: list[torch.Tensor] = []
        self.step_grad_norm: torch.Tensor | None = None

    def take_step_losses(self) -> tuple[list[str], torch.Tensor]:
        values, self.pending = torch.stack(self.pending), []
        return ["loss", "mlm/loss"], values

    def log(self, *args: Any, **kwargs: Any) -> None:
        pass


def step_fn(cfg: Any, model: Any, data: list[dict], *, guarded: bool) -> tuple[Callable[[int], None], Any]:
    terms, weights = build_terms({"objective": cfg.objective})
    backbone, loss = Backbone(model), WeightedSum(terms, weights)
    optimizer = build_optimizer([backbone], lr=1e-4, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8)
    guard = DivergenceGuard(on_nonfinite="stop", max_skips=10, spike_sigma=None, spike_window=100)  # the defaults
    shim = _ModuleShim()

    def step(i: int) -> None:
        total, logged = loss(backbone(data[i % len(data)]))
        total.backward()
        if guarded:  # as PretrainModule does: the guard's norm serves the clipping
            shim.pending.append(torch.stack([logged["loss"], logged["mlm/loss"]]))
            guard.on_before_optimizer_step(SimpleNamespace(precision_plugin=None, global_step=i), shim, optimizer)
            grads = [p for p in backbone.parameters() if p.grad is not None]
            torch.nn.utils.clip_grads_with_norm_(grads, 1.0, shim.step_grad_norm)
        else:
            torch.nn.utils.clip_grad_norm_(backbone.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, optimizer


def main(rounds: int = 8) -> dict:
    overrides = [*corpus_overrides(), "model=mini", "data.batch_size=32", "data.block_size=128"]
    cfg = load_config(overrides)
    terms, _ = build_terms({"objective": cfg.objective})
    data, tokenizer = batches(cfg, "encoder", data_format_for(terms, "encoder", "mini"), 6)
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    plain, optimizer = step_fn(cfg, copy.deepcopy(model), data, guarded=False)
    guarded, _ = step_fn(cfg, copy.deepcopy(model), data, guarded=True)
    step_seconds = interleaved({"step": plain, "step_with_guard": guarded}, rounds=rounds)

    plain(0)  # the optimizer now holds its moments: a checkpoint of realistic size
    checkpoint = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "global_step": 1}
    folder = Path(tempfile.mkdtemp(prefix="bench-ckpt-"))
    lightning_io = TorchCheckpointIO()
    write_seconds = interleaved(
        {
            "lightning_save": lambda i: lightning_io.save_checkpoint(checkpoint, folder / "lightning.ckpt"),
            "atomic_save_with_sidecar": lambda i: save_checkpoint_file(checkpoint, folder / "ours.ckpt"),
        },
        rounds=rounds,
    )
    size_mb = (folder / "ours.ckpt").stat().st_size / 1e6
    results = {
        "guard_step_ratio": step_seconds["step_with_guard"] / step_seconds["step"],
        "step_seconds": step_seconds,
        "checkpoint_mb": size_mb,
        "checkpoint_write_ratio": write_seconds["atomic_save_with_sidecar"] / write_seconds["lightning_save"],
        "checkpoint_write_seconds": write_seconds,
        "vocab": len(tokenizer),
    }
    print(
        f"divergence guard: {results['guard_step_ratio']:.3f}x the step without it; "
        f"checkpoint write ({size_mb:.0f} MB): {results['checkpoint_write_ratio']:.2f}x Lightning's own save"
    )
    save("reliability", results)
    return results


if __name__ == "__main__":
    main()
