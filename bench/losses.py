"""Loss-term benchmark: what each anti-degeneration term adds to an MLM step, side by side in one run.

Every configuration trains the same model on the same batches; the ratios are what counts.
"""

from __future__ import annotations

import copy
import resource
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from bench.common import corpus_overrides, interleaved, matmul_peak, save
from bench.spine import batches
from degen_train.config import load_config
from degen_train.losses.catalog import build_terms
from degen_train.losses.contract import TermContext, WeightedSum
from degen_train.losses.cosreg import cosine_regularizer
from degen_train.models.backbone import Backbone, build_hf_model
from degen_train.models.generator import sample_replacements
from degen_train.optim.optimizer import build_optimizer


def make_loss(sections: dict, backbone: Backbone, batch_size: int) -> WeightedSum:
    terms, weights = build_terms(sections)
    config = backbone.model.config
    context = TermContext(
        hidden_size=config.hidden_size,
        vocab_size=config.vocab_size,
        batch_size=batch_size,
        backbone=backbone,
    )
    for term in terms.values():
        term.setup(context)
    return WeightedSum(terms, weights)


def training_step(backbone: Backbone, loss: WeightedSum, data: list[dict]) -> Callable[[int], None]:
    """One training step (forward, backward, AdamW) of ``backbone`` under ``loss``."""
    optimizer = build_optimizer([backbone, loss], lr=1e-4, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8)

    def step(i: int) -> None:
        batch = data[i % len(data)]
        total, _ = loss(backbone(loss.prepare_batch(batch), requires=loss.requires))
        total.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def cosreg_at_scale() -> dict:
    """Value and gradient of R_cos at V = 250000, d = 1024: an N×N matrix would need 250 GB."""
    weights = torch.randn(250_000, 1024, requires_grad=True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    cosine_regularizer(weights).backward()
    seconds = time.perf_counter() - start
    peak_gb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 2**20
    return {
        "seconds": seconds,
        "peak_rss_growth_gb": peak_gb,
        "n_by_n_would_need_gb": 250_000**2 * 4 / 1e9,
        "matrix_gb": weights.numel() * 4 / 1e9,
    }


def main(rounds: int = 8) -> dict:
    results: dict[str, Any] = {"matmul_peak_gflops": matmul_peak() / 1e9}
    # CosReg at BERT-base's embedding size (V = 30522, d = 768) against MLM alone, batch 32 × 128.
    cfg = load_config([*corpus_overrides(), "model=base", "data.batch_size=32", "data.block_size=128"])
    data, tokenizer = batches(cfg, "encoder", "mlm", 4)
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    plain, regularized = Backbone(copy.deepcopy(model)), Backbone(model)
    seconds = interleaved(
        {
            "mlm": training_step(plain, make_loss({"objective": {"mlm": {}}}, plain, 32), data),
            "mlm_cosreg": training_step(
                regularized, make_loss({"objective": {"mlm": {}}, "regularizer": {"cosreg": {}}}, regularized, 32), data
            ),
        },
        rounds=4,
    )
    results["cosreg_base"] = {
        **{f"{k}_step_s": v for k, v in seconds.items()},
        "added": seconds["mlm_cosreg"] / seconds["mlm"] - 1,
    }
    del plain, regularized, model
    results["cosreg_250k_x_1024"] = cosreg_at_scale()

    # TaCL and COCO-LM on the mini model, batch 32 × 128, against MLM alone and against their parts.
    cfg = load_config([*corpus_overrides(), "model=mini", "data.batch_size=32", "data.block_size=128"])
    data, tokenizer = batches(cfg, "encoder", "mlm", 4)
    torch.manual_seed(0)
    model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    with tempfile.TemporaryDirectory() as teacher_dir:
        model.save_pretrained(teacher_dir)
        mlm_backbone, tacl_backbone, coco_backbone = (Backbone(copy.deepcopy(model)) for _ in range(3))
        tacl_loss = make_loss(
            {"objective": {"mlm": {}}, "regularizer": {"tacl": {"teacher": teacher_dir}}}, tacl_backbone, 32
        )
        coco_loss = make_loss({"objective": {"coco_clm": {}}, "regularizer": {"coco_scl": {}}}, coco_backbone, 32)
        teacher = tacl_loss.terms["tacl"].teacher
        generator, scl = coco_loss.terms["coco_clm"].generator, coco_loss.terms["coco_scl"]

        def teacher_forward(i: int) -> None:
            batch = data[i % len(data)]
            with torch.no_grad():
                teacher(input_ids=batch["original_ids"], attention_mask=batch["attention_mask"])

        def generator_pass(i: int) -> None:  # generator fwd + bwd, the released no-dropout sampling pass, sampling
            batch = data[i % len(data)]
            selected = batch["labels"] != -100
            logits = generator(batch, selected)
            generator.eval()
            with torch.no_grad():
                sampled_from = generator(batch, selected)
            generator.train()
            sample_replacements(sampled_from, selected, batch["sample_seed"])
            logits.float().logsumexp(-1).sum().backward()

        def crop_pass(i: int) -> None:  # the main model on the crop view, forward + backward
            view = scl.prepare_batch(data[i % len(data)])["views"][-1]
            coco_backbone(view).hidden_states[:, 0].sum().backward()

        seconds = interleaved(
            {
                "mlm": training_step(mlm_backbone, make_loss({"objective": {"mlm": {}}}, mlm_backbone, 32), data),
                "tacl": training_step(tacl_backbone, tacl_loss, data),
                "coco": training_step(coco_backbone, coco_loss, data),
                "teacher_forward": teacher_forward,
                "generator_pass": generator_pass,
                "crop_pass": crop_pass,
            },
            rounds=rounds,
        )
    results["tacl_mini"] = {
        **seconds,
        "extra_over_teacher_forward": (seconds["tacl"] - seconds["mlm"]) / seconds["teacher_forward"],
    }
    parts = seconds["generator_pass"] + seconds["crop_pass"]
    results["coco_lm_mini"] = {"extra_over_parts": (seconds["coco"] - seconds["mlm"]) / parts}
    for name, entry in results.items():
        print(name, entry)
    save("losses", results)
    return results


if __name__ == "__main__":
    main()
