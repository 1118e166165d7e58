"""Methods beyond the seeds: what SimCTG, unlikelihood, AGG and spectrum control add to a gpt2_mini MLE step,
I-STAR and SimCSE to a mini MLM step, side by side.

Each term's overhead is a ratio to the MLE step without it; next to it, the term's inherent extra work
measured alone: SimCTG's (B, T, T) similarity with its backward, unlikelihood's (N, V) logits and
log-softmax with their backward (the chunked MLE never builds them), SimCSE's two unmasked encoder passes with
their backward (in the same graph as the masked pass).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F

from bench.common import corpus_overrides, interleaved, save
from bench.losses import make_loss, training_step
from bench.spine import batches
from degen_train.config import load_config
from degen_train.losses.simctg import off_diagonal_pairs, simctg_loss_sum
from degen_train.models.backbone import Backbone, build_hf_model


def main(rounds: int = 6) -> dict[str, Any]:
    cfg = load_config([*corpus_overrides(), "model=gpt2_mini", "objective=mle", "data.batch_size=32",
                       "data.block_size=128"])  # fmt: skip
    data, tokenizer = batches(cfg, "decoder", "causal", 4)
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    mle = {"mle": dict(cfg.objective.mle)}
    steps, hidden_size = {}, model.config.hidden_size
    plain_mle = {"mle": {**mle["mle"], "chunk_size": None}}  # the (N, V) logits in one piece, as AGG makes them
    agg = {"agg": {"alpha": 0.03, "window_steps": 1000}}
    for name, objective, regularizer in (
        ("mle", mle, {}),
        ("mle_simctg", mle, {"simctg": {}}),
        ("mle_unlikelihood", mle, {"unlikelihood": {}}),
        ("mle_unchunked", plain_mle, {}),
        ("agg", agg, {}),
        ("mle_spectrum_control", mle, {"spectrum_control": {}}),
    ):
        backbone = Backbone(copy.deepcopy(model))
        steps[name] = training_step(
            backbone, make_loss({"objective": objective, "regularizer": regularizer}, backbone, 32), data
        )
    head = model.get_output_embeddings()

    def similarity_alone(i: int) -> None:  # SimCTG's inherent extra work
        batch = data[i % len(data)]
        hidden = torch.randn(*batch["input_ids"].shape, hidden_size, requires_grad=True)
        total, count = simctg_loss_sum(hidden, off_diagonal_pairs(batch["attention_mask"].bool()), margin=0.5)
        (total / count).backward()

    def full_logits_alone(i: int) -> None:  # unlikelihood's inherent extra work
        batch = data[i % len(data)]
        count = int((batch["labels"] != -100).sum())
        hidden = torch.randn(count, hidden_size, requires_grad=True)
        F.log_softmax(F.linear(hidden, head.weight.detach()), dim=-1).mean().backward()

    steps["simctg_similarity_alone"] = similarity_alone
    steps["unlikelihood_logits_alone"] = full_logits_alone
    seconds = interleaved(steps, rounds=rounds)
    base = seconds["mle"]
    result = {
        "step_seconds": seconds,
        "simctg_added": seconds["mle_simctg"] / base - 1,
        "simctg_inherent": seconds["simctg_similarity_alone"] / base,
        "unlikelihood_added": seconds["mle_unlikelihood"] / base - 1,
        "unlikelihood_inherent": seconds["unlikelihood_logits_alone"] / base,
        # AGG makes the (N, V) logits whole (its gates act on them): against the unchunked MLE step, and the chunked
        "agg_added_vs_unchunked_mle": seconds["agg"] / seconds["mle_unchunked"] - 1,
        "agg_added_vs_mle": seconds["agg"] / base - 1,
        "spectrum_control_added": seconds["mle_spectrum_control"] / base - 1,
        "vocab": len(tokenizer),
        "rounds": rounds,
    }
    result["istar"] = istar_overhead(rounds)
    result["simcse"] = simcse_overhead(rounds)
    print({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in result.items() if k != "step_seconds"})
    save("methods", result)
    return result


def mini_mlm_steps(regularizers: dict[str, dict]) -> tuple[dict, list[dict], Any]:
    """A mini MLM training step per named regularizer mix (same initial weights, batch 32 × 128), the batches,
    and the initial model."""
    cfg = load_config([*corpus_overrides(), "model=mini", "data.batch_size=32", "data.block_size=128"])
    data, tokenizer = batches(cfg, "encoder", "mlm", 4)
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    steps = {}
    for name, regularizer in regularizers.items():
        backbone = Backbone(copy.deepcopy(model))
        steps[name] = training_step(
            backbone, make_loss({"objective": {"mlm": {}}, "regularizer": regularizer}, backbone, 32), data
        )
    return steps, data, model


def istar_overhead(rounds: int) -> dict[str, Any]:
    """A mini MLM step with and without I-STAR (last layer; all layers), batch 32 × 128."""
    steps, _, _ = mini_mlm_steps({"mlm": {}, "mlm_istar": {"istar": {}}, "mlm_istar_all": {"istar": {"layers": "all"}}})
    seconds = interleaved(steps, rounds=rounds)
    return {
        "step_seconds": seconds,
        "added_last_layer": seconds["mlm_istar"] / seconds["mlm"] - 1,
        "added_all_layers": seconds["mlm_istar_all"] / seconds["mlm"] - 1,
    }


def simcse_overhead(rounds: int) -> dict[str, Any]:
    """A mini MLM step with and without SimCSE, batch 32 × 128; its inherent work: two encoder passes alone."""
    steps, data, model = mini_mlm_steps({"mlm": {}, "mlm_simcse": {"simcse": {}}})
    encoder = Backbone(copy.deepcopy(model)).train()

    def encoder_step(batch: dict, *, with_views: bool) -> None:
        """The encoder's own work: the masked pass (+ the 2B unmasked rows in the same graph), backward."""
        ids, mask = batch["original_ids"], batch["attention_mask"]
        total = encoder.encode({"input_ids": batch["input_ids"], "attention_mask": mask}).last_hidden_state.sum()
        if with_views:
            views = encoder.encode({"input_ids": torch.cat([ids, ids]), "attention_mask": torch.cat([mask, mask])})
            total = total + views.last_hidden_state[:, 0].sum()
        total.backward()
        encoder.zero_grad(set_to_none=True)

    steps["encoder_alone"] = lambda i: encoder_step(data[i % len(data)], with_views=False)
    steps["encoder_and_views_alone"] = lambda i: encoder_step(data[i % len(data)], with_views=True)
    seconds = interleaved(steps, rounds=rounds)
    # SimCSE's inherent extra work: what the 2B view rows add to the encoder's own pass, in one graph (measured
    # apart, the two passes cost ~15% less than together on this CPU: the larger live set of activations).
    inherent = (seconds["encoder_and_views_alone"] - seconds["encoder_alone"]) / seconds["mlm"]
    added = seconds["mlm_simcse"] / seconds["mlm"] - 1
    return {"step_seconds": seconds, "added": added, "inherent": inherent, "added_over_inherent": added / inherent}


if __name__ == "__main__":
    main()
