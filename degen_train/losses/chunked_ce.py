"""Cross-entropy through the output layer, position chunk by position chunk, never holding (N, V) logits.

A decoder predicts every position: at V = 50,257 a 32 × 128 batch has 206 M float32 logits (823 MB) and
as much again for their gradient. Here the logits of ``chunk_size`` positions at a time are made, turned
into the loss and, in the same pass, into the gradients of the hidden states and the output weights
(softmax − one-hot, times the weights / the hidden states), then dropped: memory O(chunk · V) instead of
O(N · V), and the backward pass only scales the stored gradients. The idea of fused linear-cross-entropy
kernels on GPU (e.g. Liger-Kernel's), written here in plain torch so that it runs on CPU too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: Tensor,  # (N, H)
        weight: Tensor,  # (V, H)
        bias: Tensor | None,  # (V,)
        targets: Tensor,  # (N,)
        chunk_size: int,
        vocabulary: int | None,  # the real entries when weight's rows are padded beyond them: columns past it −∞
    ) -> tuple[Tensor, Tensor]:
        wants_grad = any(ctx.needs_input_grad[:3])
        exact = torch.promote_types(hidden.dtype, torch.float32)  # float32 at least, as the plain form's .float()
        total = torch.zeros((), dtype=exact, device=hidden.device)
        correct = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if wants_grad else None
        grad_weight = torch.zeros_like(weight, dtype=exact) if ctx.needs_input_grad[1] else None
        grad_bias = torch.zeros_like(bias, dtype=exact) if bias is not None and ctx.needs_input_grad[2] else None
        for start in range(0, hidden.shape[0], chunk_size):
            h, y = hidden[start : start + chunk_size], targets[start : start + chunk_size]  # (C, H), (C,)
            logits = F.linear(h, weight, bias)  # (C, V), in the autocast dtype if any, like the plain form
            scores = logits.to(exact)  # no copy in float32
            if vocabulary is not None:
                scores[:, vocabulary:] = float("-inf")  # padded columns: probability 0, gradient 0
            rows = torch.arange(len(y), device=y.device)
            target = scores[rows, y]  # (C,)
            correct += (scores.argmax(-1) == y).sum()
            # Softmax in place in the one (C, V) buffer: exp(z − max), its row sums, then the division.
            peak = scores.amax(dim=-1)  # (C,)
            unnormalised = scores.sub_(peak[:, None]).exp_()
            norm = unnormalised.sum(dim=-1)  # (C,)
            total += (peak + norm.log() - target).sum()  # Σ −log softmax(z)[y] = Σ logsumexp(z) − z_y
            if not wants_grad:
                continue
            delta = unnormalised.div_(norm[:, None])  # d(Σ loss)/d logits = softmax − one-hot
            delta[rows, y] -= 1.0
            delta = delta.to(logits.dtype)
            grad_hidden[start : start + chunk_size] = delta @ weight.to(delta.dtype)
            if grad_weight is not None and delta.dtype == exact:
                grad_weight.addmm_(delta.T, h)  # accumulated inside the matmul: no (V, H) temporary per chunk
            elif grad_weight is not None:
                grad_weight += (delta.T @ h.to(delta.dtype)).to(exact)
            if grad_bias is not None:
                grad_bias += delta.to(exact).sum(0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (hidden.dtype, weight.dtype, bias.dtype if bias is not None else None)
        ctx.mark_non_differentiable(correct)
        return total, correct

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_total: Tensor, _: Tensor) -> tuple:  # type: ignore[override]
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        hidden_dtype, weight_dtype, bias_dtype = ctx.dtypes
        scale = grad_total.to(torch.promote_types(hidden_dtype, torch.float32))
        hidden_grad = (grad_hidden.to(scale.dtype) * scale).to(hidden_dtype) if grad_hidden is not None else None
        weight_grad = (grad_weight * scale).to(weight_dtype) if grad_weight is not None else None
        bias_grad = (grad_bias * scale).to(bias_dtype) if grad_bias is not None else None
        return hidden_grad, weight_grad, bias_grad, None, None, None


def chunked_linear_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    *,
    chunk_size: int,
    vocabulary: int | None = None,
) -> tuple[Tensor, Tensor]:
    """(Σ_i −log softmax(W h_i + b)[y_i], #correct) over N positions, chunk by chunk; equal to the plain form.

    hidden (N, H), weight (V, H), bias (V,) or None, targets (N,). The loss is differentiable in hidden,
    weight and bias; the count is not. ``vocabulary``: the real entries of a padded (V', H) weight; the columns
    from it on are −∞ (the loss and gradients are those of ``weight[:vocabulary]``, at the padded width's speed).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if vocabulary is not None and vocabulary >= weight.shape[0]:
        vocabulary = None  # nothing padded
    total, correct = _ChunkedLinearCrossEntropy.apply(hidden, weight, bias, targets, chunk_size, vocabulary)
    return total, correct
