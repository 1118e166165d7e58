"""Adaptive gradient gating for rare token embeddings (Yu et al., ACL 2022), as the MLE objective of a decoder."""

from __future__ import annotations

from collections import deque
from typing import Annotated, Any

import torch
import torch.nn.functional as F
from annotated_types import Ge, Interval
from torch import Tensor

from degen_train.devices.collectives import sum_over_processes
from degen_train.losses.accumulation import active_window
from degen_train.losses.contract import TermContext, TermOutput, distributed_mean, register_term
from degen_train.losses.mlm import TokenPredictionTerm, token_accuracy
from degen_train.models.output import ForwardOutput
from degen_train.models.positions import at_positions, labelled_positions


class _GatedEmbeddingGradient(torch.autograd.Function):
    """logits = h Wᵀ; the hidden states get the whole gradient, row v of W only Σ_n gate[n, v]·∂logits[n, v],
    gate[n] = g2 at rare targets, g1 at the others, 1 at the target's own row (AGG's gated logits).

    The (N, V) gate is never built: ∂W = diag(g1)·GᵀH + diag(g2 − g1)·G_rᵀH_r (r: the few rare-target rows),
    then each target row's own entry restored to gate 1 (one index_add over the N targets).
    """

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, targets: Tensor, rare_rows: Tensor, g1: Tensor,
                g2: Tensor) -> Tensor:  # fmt: skip
        ctx.save_for_backward(hidden, weight, targets, rare_rows, g1, g2)
        return hidden @ weight.T  # (N, V)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        hidden, weight, targets, rare_rows, g1, g2 = ctx.saved_tensors
        hidden = hidden.to(grad.dtype)
        grad_hidden = grad @ weight.to(grad.dtype)  # (N, H)
        grad_weight = g1.unsqueeze(1) * (grad.T @ hidden)  # (V, H)
        if rare_rows.any():
            grad_weight += (g2 - g1).unsqueeze(1) * (grad[rare_rows].T @ hidden[rare_rows])
        at_target = torch.where(rare_rows, g2[targets], g1[targets])  # (N,) the gate the products above applied
        own = grad.gather(1, targets.unsqueeze(1)).squeeze(1)  # (N,) ∂logits[n, y_n]
        grad_weight.index_add_(0, targets, ((1 - at_target) * own).unsqueeze(1) * hidden)
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None, None


def target_counts(targets: Tensor, vocab_size: int) -> Tensor:
    """(V,) how often each id occurs in ``targets``: bincount's value, without its wait for the largest id."""
    counts = torch.zeros(vocab_size, dtype=torch.long, device=targets.device)
    return counts.index_add_(0, targets, torch.ones_like(targets))


def agg_gates(
    counts: Tensor, steps: int, *, alpha: float, special_ids: list[int], per_targets: int | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """(rare, g1, g2) over the vocabulary from the last K steps' target counts, as the released criterion:
    a_v = counts_v / min(steps, K) (the mean count per step), rare ⇔ a_v < α (special tokens never);
    g1_v = a_v for rare v, else 1 (the gate when the target is not rare);
    g2_v = min(1, counts_v / mean_{r rare} counts_r) for rare v, else 1 (the gate when the target is rare).
    ``per_targets`` = T: a_v = counts_v · T / Σ counts, the mean count per T targets, which is the per-step value
    when every step holds T targets and means the same at any batch size."""
    if per_targets is None:
        appearance = counts.double() / max(steps, 1)  # (V,)
    else:
        appearance = counts.double() * per_targets / counts.sum().clamp_min(1)  # (V,)
    appearance[special_ids] = 1.0
    rare = appearance < alpha  # (V,)
    g1 = torch.where(rare, appearance, torch.ones_like(appearance))
    rare_count = rare.sum()  # the mean count of the rare tokens (0 when none is), without a host read
    rare_mean = torch.where(rare_count > 0, (counts.double() * rare).sum() / rare_count.clamp_min(1), 0.0)
    g2 = torch.where(rare, (counts.double() / (rare_mean + 1e-7)).clamp(max=1.0), torch.ones_like(appearance))
    return rare, g1.float(), g2.float()


def gated_logits(hidden: Tensor, weight: Tensor, targets: Tensor, rare: Tensor, g1: Tensor, g2: Tensor) -> Tensor:
    """(N, V) logits whose gradient onto row v of W is scaled by g2_v at rare targets, g1_v at the others, and
    never at the target's own row (gate 1): the part of a rare row's gradient that pushes it away from the
    other tokens' contexts is the one AGG gates."""
    g1, g2 = g1.to(hidden.dtype), g2.to(hidden.dtype)
    return _GatedEmbeddingGradient.apply(hidden, weight, targets, rare[targets], g1, g2)


@register_term("agg", section="objective")
class GatedLikelihoodTerm(TokenPredictionTerm):
    """L = −(1/N) Σ_t log p(x_{t+1} | x_≤t) with ∂L/∂w_v gated: ×g1_v (target frequent), ×g2_v (target rare) for
    rare v (a_v = mean count per step over the last K steps < α); Yu et al. 2022 (AGG), cross_entropy_agg.py.

    The counts are of the global batch (all-reduced: the released code counts each GPU's own targets), kept
    in a window of the last ``window_steps`` training batches that resumes exactly. The logged value is the
    plain cross-entropy: the gates only change where the output embedding's gradient goes.

    Source: Yu et al. 2022, "Rare Tokens Degenerate All Tokens: Improving Neural Text Generation via Adaptive
    Gradient Gating for Rare Token Embeddings" (ACL 2022); released: ysw1021/AGG, fairseq/criterions/
    cross_entropy_agg.py.
    Needs: a decoder and causal blocks; its window of counts is kept in checkpoints.
    Example: ``degen-train recipe=agg model=gpt2_tiny``
    """

    family = "decoder"
    data_format = "causal"
    paper_metrics = ("rare_share",)
    # agg_target_ids: the (V,) target counts of a micro-batch, so that an accumulation window counts as one update
    averages_over = ("targets", "agg_target_ids")

    def __init__(
        self,
        *,
        alpha: Annotated[float, Interval(gt=0, lt=1)] = 0.03,
        window_steps: Annotated[int, Ge(1)] = 1000,
        per_targets: Annotated[int, Ge(1)] | None = 32768,
    ) -> None:
        super().__init__(chunk_size=None)
        self.per_targets = per_targets
        self.alpha, self.window_steps = alpha, window_steps
        self.requires = frozenset()  # its own logits from the labelled hidden states
        self.window: deque[tuple[Tensor, Tensor]] = deque()  # per step: (ids, counts) of the targets seen
        self.steps = 0
        self.special_ids: list[int] = []

    def setup(self, context: TermContext) -> None:
        self.register_buffer("counts", torch.zeros(context.vocab_size, dtype=torch.long))
        config = context.backbone.model.config if context.backbone is not None else None
        names = ("bos_token_id", "eos_token_id", "pad_token_id")
        self.special_ids = sorted({i for n in names if isinstance(i := getattr(config, n, None), int)})

    def count(self, over: str, batch: dict[str, Tensor]) -> Tensor:
        if over != "agg_target_ids":
            return super().count(over, batch)
        labels = batch["labels"]
        return target_counts(at_positions(labels, labelled_positions(batch)), self.counts.numel())  # (V,)

    @torch.no_grad()
    def _count(self, targets: Tensor) -> None:
        """One update's target counts: this batch's, or (under accumulation) its whole window's, once."""
        window = active_window()
        if window is not None:
            if window.index == 0:  # the window's counts are summed over its micro-batches and the processes
                self._add_step(window.counts["agg_target_ids"].to(self.counts.device, torch.long))
            return
        step = target_counts(targets, self.counts.numel())  # (V,)
        self._add_step(sum_over_processes(step))

    def _add_step(self, step: Tensor) -> None:
        ids = step.nonzero().squeeze(1)
        self.window.append((ids, step[ids]))
        self.counts += step
        if len(self.window) > self.window_steps:
            old_ids, old_counts = (t.to(self.counts.device) for t in self.window.popleft())
            self.counts[old_ids] -= old_counts
        self.steps += 1

    def forward(self, output: ForwardOutput) -> TermOutput:
        targets, hidden = output.target_ids, output.labelled_hidden
        assert hidden is not None, "AGG needs the labelled hidden states (a vocabulary head we can split)"
        if self.training:
            self._count(targets)
        rare, g1, g2 = agg_gates(
            self.counts,
            min(self.steps, self.window_steps),
            alpha=self.alpha,
            special_ids=self.special_ids,
            per_targets=self.per_targets,
        )
        logits = gated_logits(hidden, output.output_embedding_weight, targets, rare, g1, g2)  # (N, V)
        if output.output_bias is not None:
            logits = logits + output.output_bias
        total = F.cross_entropy(logits.float(), targets, reduction="sum")
        count = torch.tensor(float(targets.numel()), device=targets.device)
        rare_targets = rare[targets].float()  # (N,)
        metrics = {
            "accuracy": token_accuracy(logits.detach(), targets),
            "rare_share": rare.float().mean(),  # of the vocabulary
            "rare_target_share": rare_targets.mean() if targets.numel() else rare_targets.new_zeros(()),
        }
        return TermOutput(distributed_mean(total, count, over="targets"), metrics)

    def get_extra_state(self) -> dict[str, Any]:
        """The window as plain lists of ints: its size changes every step, which a sharded (DCP) checkpoint
        only allows for non-tensor values; lists of ints still load with weights_only."""
        return {
            "steps": self.steps,
            "ids": [ids.tolist() for ids, _ in self.window],
            "counts": [counts.tolist() for _, counts in self.window],
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self.window = deque(
            (torch.tensor(ids, dtype=torch.long), torch.tensor(counts, dtype=torch.long))
            for ids, counts in zip(state["ids"], state["counts"], strict=True)
        )
