"""Gao et al. 2019 cosine regularization of the (tied) embedding matrix, or of hidden states."""

from __future__ import annotations

import logging
from typing import Literal

import torch
from torch import Tensor, nn

from degen_train.devices.collectives import is_distributed, sum_over_processes, sum_with_gradient
from degen_train.devices.precision import autocast_off
from degen_train.devices.sharding import local_shard
from degen_train.losses.contract import LossTerm, TermContext, TermOutput, register_term
from degen_train.models.output import ForwardOutput

log = logging.getLogger("degen_train")


class _UnitSum(torch.autograd.Function):
    """(Σ_i ŵ_i, number of non-zero rows) for the rows w_i of W, ŵ = w/‖w‖, in four passes over W.

    Autograd through F.normalize makes about ten passes over the (V, d) matrix; by hand the backward is
    ∂/∂w_i = (g − ŵ_i (ŵ_i·g)) / ‖w_i‖ for the incoming gradient g of Σŵ (a zero row gets none).
    """

    @staticmethod
    def forward(ctx, weights: Tensor) -> tuple[Tensor, Tensor]:  # noqa: ANN001
        norms = weights.norm(dim=1)  # (N,)
        inverse = torch.where(norms > 0, 1 / norms.clamp_min(1e-30), torch.zeros_like(norms))
        ctx.save_for_backward(weights, inverse)
        nonzero = (inverse > 0).sum().to(weights.dtype)
        ctx.mark_non_differentiable(nonzero)
        return weights.T @ inverse, nonzero  # (d,), ()

    @staticmethod
    def backward(ctx, grad: Tensor, _: Tensor) -> Tensor:  # noqa: ANN001
        weights, inverse = ctx.saved_tensors
        projection = (weights @ grad) * inverse**3  # (N,) (ŵ_i·g) / ‖w_i‖²
        return inverse[:, None] * grad[None, :] - weights * projection[:, None]


class _SumOfEqualLosses(torch.autograd.Function):
    """All-reduce (sum) whose backward passes the gradient through unsummed: every process computes the same loss
    of the sum, so ∂L/∂(its own part) is ∂L/∂(sum), already whole on each process."""

    @staticmethod
    def forward(ctx, part: Tensor) -> Tensor:  # noqa: ANN001
        total = part.clone()
        torch.distributed.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # noqa: ANN001
        return grad


def sharded_cosine_regularizer(local_rows: Tensor, count: int | Tensor, *, normalization: str = "n_squared") -> Tensor:
    """R_cos of a row-sharded matrix from this process's rows: (‖Σ_ranks Σ_local ŵ_i‖² − N) / N²; Gao et al. 2019.

    One all-reduce of a d-vector; time and memory O(V·d/world). The gradient reaches only this process's rows,
    whole (not to be averaged): under FSDP2 it lands on the shard itself.
    """
    with autocast_off(local_rows):
        part, nonzero = _UnitSum.apply(local_rows.float())
        total = _SumOfEqualLosses.apply(part)  # (d,) Σ over every process's rows
        torch.distributed.all_reduce(nonzero)
        count = float(count)
        if count < 2:
            return total.new_zeros(())
        return (total @ total - nonzero) / (count * count if normalization == "n_squared" else count * (count - 1))


def cosine_regularizer(vectors: Tensor, *, normalization: str = "n_squared") -> Tensor:
    """R_cos = (1/N²) Σ_i Σ_{j≠i} cos(w_i, w_j) = (‖Σ_i ŵ_i‖² − N) / N²; Gao et al. 2019 (ICLR), eq. 4.

    Exact in O(N·d) time and memory (no N×N matrix), in float32 whatever the autocast dtype.
    ``normalization="pairs"`` divides by N(N−1) instead: the mean over distinct pairs.
    """
    count = vectors.shape[0]
    if count < 2:
        return vectors.new_zeros((), dtype=torch.float32)
    with autocast_off(vectors):
        total, nonzero = _UnitSum.apply(vectors.float())  # (d,), ()
        off_diagonal = total @ total - nonzero
    return off_diagonal / (count * count if normalization == "n_squared" else count * (count - 1))


def global_cosine_regularizer(vectors: Tensor, *, normalization: str = "n_squared") -> tuple[Tensor, Tensor]:
    """(R_cos, N) over the vectors of every process: (‖Σ_i ŵ_i‖² − N) / N² with Σ and N summed over processes.

    The sum of unit vectors is all-reduced with a differentiable collective: every process computes the same
    global value, whose gradient the collective's backward sums over processes and DDP then averages, so the
    update equals one process holding the global batch (Gao et al. 2019, eq. 4, on hidden states)."""
    if not is_distributed():
        count = torch.tensor(float(vectors.shape[0]), device=vectors.device)
        return cosine_regularizer(vectors, normalization=normalization), count
    with autocast_off(vectors):
        total = sum_with_gradient(torch.nn.functional.normalize(vectors.float(), dim=-1).sum(0))  # (H,) Σ, processes
        count = sum_over_processes(torch.tensor(float(vectors.shape[0]), device=vectors.device))
        if count < 2:
            return total.new_zeros(()), count
        pairs = count * count if normalization == "n_squared" else count * (count - 1)
        return (total @ total - count) / pairs, count


@register_term("cosreg")
class CosineRegularizer(LossTerm):
    """γ · R_cos, R_cos = (1/N²) Σ_{i≠j} cos(w_i, w_j) over the embedding rows (all, or only the tokens seen so
    far) or over the batch's hidden states; Gao et al. 2019.

    Source: Gao et al. 2019, "Representation Degeneration Problem in Training Natural Language Generation Models"
    (ICLR 2019); no released code: the paper's cosine regularization transcribed (computed as (‖Σŵ‖² − N)/N²).
    Needs: any model: its embedding matrix (``target=embedding``) or the batch's hidden states.
    Example: ``degen-train recipe=gao_cosreg model=gpt2_tiny``
    """

    def __init__(
        self,
        *,
        matrix: Literal["input", "output", "both"] = "output",
        rows: Literal["all", "seen"] = "all",
        target: Literal["embedding", "hidden"] = "embedding",
        normalization: Literal["n_squared", "pairs"] = "n_squared",
    ) -> None:
        super().__init__()
        self.matrix, self.rows, self.target, self.normalization = matrix, rows, target, normalization
        if target == "hidden":
            self.mixes_samples = "one Σŵ over the batch's hidden states"
        elif rows == "seen":
            self.mixes_samples = "the rows the batch has seen so far (marked as each micro-batch arrives)"
        # Which token ids have appeared in training inputs; checkpointed, so "seen" survives a resume.
        self.register_buffer("seen", torch.zeros(0, dtype=torch.bool))

    def setup(self, context: TermContext) -> None:
        self.seen = torch.zeros(context.vocab_size, dtype=torch.bool)

    def head_parameters(self, backbone: nn.Module) -> list[nn.Parameter]:
        """An untied output matrix it regularizes: declared so a weight-0 MLE/MLM term leaves it trainable."""
        output = backbone.model.get_output_embeddings()
        tied = output is None or output.weight is backbone.model.get_input_embeddings().weight
        return [output.weight] if self.target == "embedding" and self.matrix != "input" and not tied else []

    def forward(self, output: ForwardOutput) -> TermOutput:
        if self.target == "hidden":
            vectors = output.hidden_states[output.attention_mask.bool()]  # (tokens, H)
            loss, count = global_cosine_regularizer(vectors, normalization=self.normalization)
            # The loss under n_squared is (N−1)/N times the mean over distinct pairs; log the mean itself.
            scale = count / (count - 1).clamp_min(1) if self.normalization == "n_squared" else 1.0
            return TermOutput(loss, {"mean_pair_cosine": loss.detach() * scale})
        if self.rows == "seen":
            self._mark_seen(output)
        losses, counts = zip(*(self._regularize(m) for m in self._matrices(output)), strict=True)
        loss = torch.stack(losses).mean()
        return TermOutput(loss, {"rows": loss.new_tensor(float(counts[0])).detach()})

    def _regularize(self, matrix: Tensor) -> tuple[Tensor, int]:
        """(R_cos, rows counted) of one matrix: shard-wise when FSDP2 shards it, else whole."""
        shard = local_shard(matrix)
        if shard is None and matrix._base is not None:  # a padded vocabulary's first V rows (models/vocabulary.py)
            shard = local_shard(matrix._base)
        if shard is None:
            if self.rows == "seen":
                matrix = matrix[self.seen[: matrix.shape[0]]]
            return cosine_regularizer(matrix, normalization=self.normalization), matrix.shape[0]
        local, offset = shard
        local = local[: max(0, matrix.shape[0] - offset)]  # rows past V (padding) left out
        count = matrix.shape[0]
        if self.rows == "seen":
            seen = self.seen[: matrix.shape[0]]
            local, count = local[seen[offset : offset + local.shape[0]]], int(seen.sum())
        if not getattr(self, "_said_sharded", False):
            log.info(
                "cosreg: computed on each process's %d of %d rows (FSDP2 shards), one all-reduce",
                *local.shape[:1],
                count,
            )
            self._said_sharded = True
        return sharded_cosine_regularizer(local, count, normalization=self.normalization), count

    def _matrices(self, output: ForwardOutput) -> list[Tensor]:
        tied = output.embedding_weight is output.output_embedding_weight
        if self.matrix == "input" or tied:
            return [output.embedding_weight]
        if self.matrix == "output":
            return [output.output_embedding_weight]
        return [output.embedding_weight, output.output_embedding_weight]

    @torch.no_grad()
    def _mark_seen(self, output: ForwardOutput) -> None:
        if not self.training:
            return
        ids = output.original_ids if output.original_ids is not None else output.input_ids
        batch_seen = torch.zeros_like(self.seen)
        batch_seen[ids[output.attention_mask.bool()]] = True
        batch_seen = sum_over_processes(batch_seen.to(torch.uint8), op="max").bool()  # seen by any process
        self.seen |= batch_seen
