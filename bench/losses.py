"""Issue 3 benchmark: what each anti-degeneration term adds to an MLM step, side by side in one run.

Every configuration trains the same model on the same batches; the ratios are what counts.
"""

from __future__ import annotations

import resource
import tempfile
import time
from typing import Any

import torch

from bench.common import corpus_overrides, matmul_peak, save
from bench.spine import batches
from degen_train.config import load_config
from degen_train.models.backbone import Backbone, build_hf_model
from degen_train.optim import build_optimizer
from degen_train.regularizers.cosreg import cosine_regularizer
from degen_train.terms import TermContext, WeightedSum, build_terms


def make_loss(sections: dict, backbone: Backbone, batch_size: int) -> WeightedSum:
    terms, weights = build_terms(sections)
    config = backbone.model.config
    context = TermContext(
        family="encoder",
        hidden_size=config.hidden_size,
        vocab_size=config.vocab_size,
        batch_size=batch_size,
        model_name="bench",
        backbone=backbone,
    )
    for term in terms.values():
        term.setup(context)
    return WeightedSum(terms, weights)


def step_seconds(backbone: Backbone, loss: WeightedSum, data: list[dict], repeats: int) -> float:
    """Median seconds of one training step (forward, backward, AdamW), after one warm-up step."""
    optimizer = build_optimizer([backbone, loss], lr=1e-4, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8)
    times = []
    for i in range(repeats + 1):
        batch = data[i % len(data)]
        start = time.perf_counter()
        total, _ = loss(backbone(loss.prepare_batch(batch, backbone), requires=loss.requires))
        total.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return sorted(times[1:])[len(times[1:]) // 2]


def timed(fn: Any, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


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


def main(repeats: int = 8) -> dict:
    results: dict[str, Any] = {"matmul_peak_gflops": matmul_peak() / 1e9}
    # CosReg at BERT-base's embedding size (V = 30522, d = 768) against MLM alone.
    cfg = load_config([*corpus_overrides(), "model=base", "data.batch_size=32", "data.block_size=128"])
    data, tokenizer = batches(cfg, "encoder", "mlm", 4)
    torch.manual_seed(0)
    base = Backbone(build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False))
    mlm = step_seconds(base, make_loss({"objective": {"mlm": {}}}, base, 32), data, 3)
    cos = step_seconds(base, make_loss({"objective": {"mlm": {}}, "regularizer": {"cosreg": {}}}, base, 32), data, 3)
    results["cosreg_base"] = {"mlm_step_s": mlm, "mlm_cosreg_step_s": cos, "added": cos / mlm - 1}
    results["cosreg_250k_x_1024"] = cosreg_at_scale()
    del base

    # TaCL and COCO-LM on the mini model, batch 32 × 128.
    cfg = load_config([*corpus_overrides(), "model=mini", "data.batch_size=32", "data.block_size=128"])
    data, tokenizer = batches(cfg, "encoder", "mlm", repeats + 1)
    torch.manual_seed(0)
    mini = Backbone(build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False))
    with tempfile.TemporaryDirectory() as teacher_dir:
        mini.model.save_pretrained(teacher_dir)
        mlm = step_seconds(mini, make_loss({"objective": {"mlm": {}}}, mini, 32), data, repeats)
        tacl_loss = make_loss({"objective": {"mlm": {}}, "regularizer": {"tacl": {"teacher": teacher_dir}}}, mini, 32)
        tacl = step_seconds(mini, tacl_loss, data, repeats)
        teacher = tacl_loss.terms["tacl"].teacher

        def teacher_forward() -> None:
            with torch.no_grad():
                teacher(input_ids=data[0]["original_ids"], attention_mask=data[0]["attention_mask"])

        teacher_s = timed(teacher_forward, repeats)
    results["tacl_mini"] = {
        "mlm_step_s": mlm,
        "tacl_step_s": tacl,
        "teacher_forward_s": teacher_s,
        "extra_over_teacher_forward": (tacl - mlm) / teacher_s,
    }

    coco_loss = make_loss({"objective": {"coco_clm": {}}, "regularizer": {"coco_scl": {}}}, mini, 32)
    coco = step_seconds(mini, coco_loss, data, repeats)
    generator = coco_loss.terms["coco_clm"].generator
    scl = coco_loss.terms["coco_scl"]

    def generator_pass() -> None:  # generator forward + backward and the sampling it feeds
        batch = data[0]
        logits = generator(batch, batch["labels"] != -100)
        logits.float().logsumexp(-1).sum().backward()

    def crop_pass() -> None:  # the main model on the crop view, forward + backward
        view = scl.prepare_batch(data[0], mini)["views"][-1]
        mini(view).hidden_states[:, 0].sum().backward()

    parts = timed(generator_pass, repeats) + timed(crop_pass, repeats)
    mini.zero_grad(set_to_none=True)
    results["coco_lm_mini"] = {
        "mlm_step_s": mlm,
        "coco_step_s": coco,
        "generator_plus_crop_s": parts,
        "extra_over_parts": (coco - mlm) / parts,
    }
    for name, entry in results.items():
        print(
            name,
            {k: round(v, 4) if isinstance(v, float) else v for k, v in entry.items()}
            if isinstance(entry, dict)
            else round(entry, 1),
        )
    save("losses", results)
    return results


if __name__ == "__main__":
    main()
