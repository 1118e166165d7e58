"""Gao et al.'s cosine regularizer: hand case, the naive N×N form, options and gradients."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from degen_train.losses.contract import TermContext
from degen_train.losses.cosreg import CosineRegularizer, cosine_regularizer
from tests.helpers import forward_output


def naive(vectors: torch.Tensor, denominator: float) -> torch.Tensor:
    unit = F.normalize(vectors, dim=-1)
    cos = unit @ unit.T  # (N, N)
    return (cos.sum() - cos.diagonal().sum()) / denominator


def test_hand_case_three_rows() -> None:
    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # cos pairs: 0, 1/√2, 1/√2; each counted twice over i≠j -> 2√2; Gao divides by N² = 9.
    assert cosine_regularizer(rows).item() == pytest.approx(2 * math.sqrt(2) / 9, rel=1e-6)
    assert cosine_regularizer(rows, normalization="pairs").item() == pytest.approx(math.sqrt(2) / 3, rel=1e-6)


@pytest.mark.parametrize("count", [2, 7, 50])
def test_matches_the_naive_form_value_and_gradient(count: int) -> None:
    weights = torch.randn(count, 16, dtype=torch.float64, requires_grad=True)
    ours = cosine_regularizer(weights)
    (grad_ours,) = torch.autograd.grad(ours, weights)
    reference = naive(weights.float(), count * count)
    (grad_ref,) = torch.autograd.grad(reference, weights)
    assert ours.item() == pytest.approx(reference.item(), abs=1e-6)
    assert torch.allclose(grad_ours, grad_ref, atol=1e-6)


def test_runs_in_float32_under_bf16_autocast() -> None:
    weights = torch.randn(300, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        value = cosine_regularizer(weights)
    assert value.dtype == torch.float32
    assert value.item() == pytest.approx(naive(weights, 300 * 300).item(), abs=1e-6)


def test_seen_rows_only_and_hidden_target() -> None:
    embedding = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
    term = CosineRegularizer(rows="seen")
    term.setup(TermContext(hidden_size=2, vocab_size=4, batch_size=1))
    out = forward_output(logits=torch.zeros(1, 4), targets=torch.tensor([0]))
    out = type(out)(
        **{
            **out.__dict__,
            "embedding_weight": embedding,
            "output_embedding_weight": embedding,
            "input_ids": torch.tensor([[0, 3]]),
            "attention_mask": torch.ones(1, 2, dtype=torch.long),
        }
    )
    # Seen rows 0 and 3 are opposite: cos = -1 twice over i≠j, divided by N² = 4.
    assert term(out).loss.item() == pytest.approx(-0.5)
    assert term.seen.tolist() == [True, False, False, True]
    hidden = CosineRegularizer(target="hidden")
    out = type(out)(**{**out.__dict__, "hidden_states": torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])})
    assert hidden(out).loss.item() == pytest.approx(2 / math.sqrt(2) / 4)


def test_bad_option_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"regularizer.cosreg.rows='rare' is not one of all, seen"):
        CosineRegularizer(rows="rare")


def test_untied_models_regularise_the_output_matrix_by_default() -> None:
    """Gao et al. 2019 regularise the softmax (output) embedding matrix: the default when the two are untied."""
    inputs = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # orthogonal: R = 0
    outputs = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # identical rows: R = 2/4
    out = forward_output(logits=torch.zeros(1, 4), targets=torch.tensor([0]))
    out = type(out)(**{**out.__dict__, "embedding_weight": inputs, "output_embedding_weight": outputs})
    assert CosineRegularizer()(out).loss.item() == pytest.approx(0.5)
    assert CosineRegularizer(matrix="input")(out).loss.item() == pytest.approx(0.0)


def _shard_wise_on_one_rank(rank: int, port: int, results: dict) -> None:  # noqa: ANN001
    import os

    import torch.distributed as dist

    from degen_train.losses.cosreg import sharded_cosine_regularizer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    weights = torch.randn(1001, 16, generator=torch.Generator().manual_seed(0))
    weights[7] = 0  # a zero row counts in N but has no direction (and gets no gradient)
    chunk = 501  # torch.chunk's split of 1001 rows over 2 ranks: 501 + 500, as FSDP2 shards dim 0
    local = weights[rank * chunk : (rank + 1) * chunk].clone().requires_grad_()
    for normalization in ("n_squared", "pairs"):
        local.grad = None
        loss = sharded_cosine_regularizer(local, 1001, normalization=normalization)
        loss.backward()
        results[(rank, normalization)] = (loss.detach(), local.grad.clone())
    dist.destroy_process_group()


def test_shard_wise_value_and_gradient_equal_the_whole_matrix() -> None:
    """Two gloo processes, each holding half of an odd number of rows (as FSDP2 shards it): the one all-reduce of
    Σŵ gives R_cos and each process's rows' gradient of the unsharded computation (Gao et al. 2019, eq. 4)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_shard_wise_on_one_rank, args=(port, results), nprocs=2)
    weights = torch.randn(1001, 16, generator=torch.Generator().manual_seed(0))
    weights[7] = 0
    for normalization in ("n_squared", "pairs"):
        whole = weights.clone().requires_grad_()
        expected = cosine_regularizer(whole, normalization=normalization)
        expected.backward()
        for rank in (0, 1):
            loss, grad = results[(rank, normalization)]
            torch.testing.assert_close(loss, expected.detach(), rtol=1e-6, atol=0)
            rows = whole.grad[rank * 501 : (rank + 1) * 501]  # entries ~4e-6: atol is rounding of near-zero ones
            torch.testing.assert_close(grad, rows, rtol=1e-5, atol=1e-10)
