"""Divergence caught at the step it happens: stop, or skip the update; loss spikes skipped when asked."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from degen_train.callbacks.divergence import DivergenceError
from degen_train.losses.contract import TermOutput
from degen_train.losses.mlm import MaskedLMTerm
from tests.helpers import checkpoint_weights, logged, run

EVERY_STEP = ["callbacks.checkpoint.every_n_train_steps=1", "callbacks.checkpoint.save_top_k=-1"]


def poison(monkeypatch: pytest.MonkeyPatch, steps: set[int], factor: float = math.nan) -> None:
    """Multiply the MLM loss by ``factor`` at the given training steps (validation passes are left alone)."""
    original = MaskedLMTerm.forward
    seen = {"training_calls": 0}

    def forward(self: MaskedLMTerm, output):  # noqa: ANN001, ANN202
        result = original(self, output)
        if not torch.is_grad_enabled():
            return result
        step, seen["training_calls"] = seen["training_calls"], seen["training_calls"] + 1
        return TermOutput(result.loss * factor, result.metrics) if step in steps else result

    monkeypatch.setattr(MaskedLMTerm, "forward", forward)


def test_nonfinite_loss_stops_at_its_step_naming_the_term(
    tmp_path: Path, drill: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    poison(monkeypatch, {3})
    with pytest.raises(DivergenceError, match=r"step 3: non-finite loss in term\(s\) mlm\. Training stopped"):
        run(tmp_path, *drill, *EVERY_STEP)
    assert not (tmp_path / "hf").exists() and not (tmp_path / "summary.json").exists()
    saved = sorted((tmp_path / "checkpoints").glob("step=*.ckpt"))
    assert [p.name for p in saved] == [f"step={s:08d}.ckpt" for s in (1, 2, 3)]
    for path in saved:
        assert all(t.isfinite().all() for t in checkpoint_weights(path).values() if t.is_floating_point())


def test_the_issue_reproduction_lr_1e3_stops_instead_of_exporting_nan(tmp_path: Path, drill: list[str]) -> None:
    """degen-train ... optimizer.lr=1e3 used to exit 0 with every exported tensor NaN."""
    with pytest.raises(DivergenceError, match=r"non-finite"):
        run(tmp_path, *drill, "trainer.max_steps=40", "data.batch_size=4", "optimizer.lr=1e3")
    assert not (tmp_path / "hf").exists()


def test_skip_leaves_weights_and_optimizer_state_untouched(
    tmp_path: Path, drill: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    poison(monkeypatch, {3})
    summary = run(tmp_path, *drill, *EVERY_STEP, "callbacks.divergence.on_nonfinite=skip")
    assert summary["final_step"] == 8 and (tmp_path / "hf").exists()
    before = torch.load(tmp_path / "checkpoints" / "step=00000003.ckpt", weights_only=True)
    after = torch.load(tmp_path / "checkpoints" / "step=00000004.ckpt", weights_only=True)
    assert all(torch.equal(before["state_dict"][k], after["state_dict"][k]) for k in before["state_dict"])
    states = before["optimizer_states"][0]["state"], after["optimizer_states"][0]["state"]
    assert all(torch.equal(states[0][i]["exp_avg"], states[1][i]["exp_avg"]) for i in states[0])
    step_5 = torch.load(tmp_path / "checkpoints" / "step=00000005.ckpt", weights_only=True)["state_dict"]
    assert any(not torch.equal(after["state_dict"][k], step_5[k]) for k in step_5)  # training went on
    assert logged(tmp_path, "train/skipped_steps") == {s: float(s >= 3) for s in range(8)}  # a running count


def test_skip_stops_after_max_skips(tmp_path: Path, drill: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    poison(monkeypatch, {2, 3, 4, 5})
    with pytest.raises(
        DivergenceError, match=r"step 4: .*3 updates skipped, more than callbacks.divergence.max_skips=2"
    ):
        run(tmp_path, *drill, "callbacks.divergence.on_nonfinite=skip", "callbacks.divergence.max_skips=2")


def test_loss_spike_is_skipped_when_the_guard_is_on(
    tmp_path: Path, drill: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    poison(monkeypatch, {12}, factor=50.0)
    settings = [
        *drill,
        "trainer.max_steps=14",
        "callbacks.divergence.spike_sigma=4",
        "callbacks.divergence.spike_window=8",
    ]
    run(tmp_path / "guarded", *settings)
    assert logged(tmp_path / "guarded", "train/skipped_steps") == {s: float(s >= 12) for s in range(14)}
    monkeypatch.undo()
    poison(monkeypatch, {12}, factor=50.0)
    run(tmp_path / "off", *settings[:-2])  # off by default: the spike is trained on
    assert set(logged(tmp_path / "off", "train/skipped_steps").values()) == {0.0}


def test_non_finite_weights_are_never_exported(tmp_path: Path) -> None:
    from transformers import BertConfig, BertForMaskedLM

    from degen_train.run.export import export_pretrained

    model = BertForMaskedLM(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2))
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight[3, 0] = math.nan
    with pytest.raises(ValueError, match=r"refusing to export non-finite weights .*word_embeddings\.weight"):
        export_pretrained(model, None, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


# The deferred way (fused AdamW: the default on a GPU; optimizer.fused=true here): the verdict is computed on the
# device, the update skipped there through the optimizer's found_inf, and read by the host later. The outcome
# must be the same as the immediate check's.
DEFERRED = ["optimizer.fused=true"]


def only_deferred(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail if the guard falls back to reading its verdict in the step."""
    from degen_train.callbacks.divergence import DivergenceGuard

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the guard read its verdict in the step: the deferred way was expected")

    monkeypatch.setattr(DivergenceGuard, "_check_now", refuse)


def test_deferred_stop_names_the_step_and_saves_nothing_after_it(
    tmp_path: Path, drill: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    only_deferred(monkeypatch)
    poison(monkeypatch, {3})
    with pytest.raises(DivergenceError, match=r"step 3: non-finite loss in term\(s\) mlm\. Training stopped"):
        run(tmp_path, *drill, *EVERY_STEP, *DEFERRED)
    assert not (tmp_path / "hf").exists() and not (tmp_path / "summary.json").exists()
    saved = sorted((tmp_path / "checkpoints").glob("step=*.ckpt"))
    assert [p.name for p in saved] == [f"step={s:08d}.ckpt" for s in (1, 2, 3)]  # step 4's was held, then refused
    for path in saved:
        assert all(t.isfinite().all() for t in checkpoint_weights(path).values() if t.is_floating_point())


def test_deferred_skip_leaves_weights_and_optimizer_state_untouched(
    tmp_path: Path, drill: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    only_deferred(monkeypatch)
    poison(monkeypatch, {3})
    summary = run(tmp_path, *drill, *EVERY_STEP, *DEFERRED, "callbacks.divergence.on_nonfinite=skip")
    assert summary["final_step"] == 8 and (tmp_path / "hf").exists()
    before = torch.load(tmp_path / "checkpoints" / "step=00000003.ckpt", weights_only=True)
    after = torch.load(tmp_path / "checkpoints" / "step=00000004.ckpt", weights_only=True)
    assert all(torch.equal(before["state_dict"][k], after["state_dict"][k]) for k in before["state_dict"])
    states = before["optimizer_states"][0]["state"], after["optimizer_states"][0]["state"]
    assert all(torch.equal(states[0][i]["exp_avg"], states[1][i]["exp_avg"]) for i in states[0])
    assert all(torch.equal(states[0][i]["step"], states[1][i]["step"]) for i in states[0])  # not counted either
    assert logged(tmp_path, "train/skipped_steps") == {s: float(s >= 3) for s in range(8)}  # counted on the device


def test_deferred_skip_stops_after_max_skips(tmp_path: Path, drill: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    only_deferred(monkeypatch)
    poison(monkeypatch, {2, 3, 4, 5})
    with pytest.raises(DivergenceError, match=r"step 4: .*3 updates skipped, more than callbacks.divergence.max_skips"):
        run(tmp_path, *drill, *DEFERRED, "callbacks.divergence.on_nonfinite=skip", "callbacks.divergence.max_skips=2")


def test_the_deferred_and_the_immediate_check_train_alike(tmp_path: Path, drill: list[str]) -> None:
    """With nothing to refuse, the deferred way changes nothing: the same weights as a run checked in the step
    (both with fused AdamW; the immediate check forced by the spike rule's presence, which needs the loss)."""
    run(tmp_path / "deferred", *drill, *DEFERRED)
    run(tmp_path / "immediate", *drill, *DEFERRED, "callbacks.divergence.spike_sigma=1000")
    a = checkpoint_weights(tmp_path / "deferred" / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(tmp_path / "immediate" / "checkpoints" / "last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a)
