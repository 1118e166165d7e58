"""The output layer and its cross-entropy as one ``torch.compile``d graph, at a padded row count (issue 45.2's lever).

Eager, the head is a matmul and then the softmax's passes over the (N, V) logits, each a kernel reading and writing
them (max, exp, sum, log, the gather, and as many in backward); compiled, inductor fuses those passes. N changes
with every batch (the masked ~15% of an MLM batch), so the rows are padded up to a multiple of ROW_BUCKET with
targets −100 (ignored: no loss, no gradient) and a run meets a few shapes; after a second one dynamo compiles the
row count as dynamic, so a run compiles at most twice. The loss and gradients are the eager head's
(tests/unit/test_compiled_head.py). The (N, V) logits exist at once, as in the eager whole-logits form: for a decoder
at large B·T, the chunked form (losses/chunked_ce.py) bounds memory instead. Whether this wins is a GPU measurement:
bench-gpu's ``levers`` row (``*_head_eager`` against ``best``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

ROW_BUCKET = 256  # rows padded up to a multiple of this: few distinct shapes per run
BACKEND = "inductor"  # torch.compile's backend (a test of the term's path, not of inductor, takes aot_eager)


def head_cross_entropy(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, vocabulary: int
) -> tuple[Tensor, Tensor]:
    """(Σ_i −log softmax(W h_i + b)[y_i], #correct) over the rows whose target is not −100; columns from
    ``vocabulary`` on (a padded vocabulary's) are −∞. hidden (N, H), weight (V', H), bias (V',), targets (N,)."""
    logits = F.linear(hidden, weight, bias)  # (N, V')
    if vocabulary < logits.shape[-1]:
        padded = torch.arange(logits.shape[-1], device=logits.device) >= vocabulary  # (V',)
        logits = logits.masked_fill(padded, float("-inf"))
    total = F.cross_entropy(logits.float(), targets, ignore_index=-100, reduction="sum")
    correct = (logits.detach().argmax(-1) == targets).sum()  # a padded row's −100 is never an arg-max
    return total, correct


_compiled: Callable[..., tuple[Tensor, Tensor]] | None = None


def compiled_head_cross_entropy(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, *, vocabulary: int
) -> tuple[Tensor, Tensor]:
    """``head_cross_entropy`` compiled, on rows padded up to a multiple of ROW_BUCKET (the padding's targets −100)."""
    global _compiled
    if _compiled is None:  # one compiled function per process; dynamo keys its graphs on the shapes it meets
        _compiled = torch.compile(head_cross_entropy, backend=BACKEND)
    rows = hidden.shape[0]
    extra = -rows % ROW_BUCKET if rows else ROW_BUCKET
    hidden = F.pad(hidden, (0, 0, 0, extra))  # (N + extra, H): zero rows
    targets = F.pad(targets, (0, extra), value=-100)  # (N + extra,)
    return _compiled(hidden, weight, bias, targets, vocabulary)
