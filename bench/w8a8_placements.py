"""How far each W8A8 placement as released (issue 54.3) moves a tiny model's quantized logits, against the whole
quantization error: BERT's MLP quantizer after the GELU (validate_mlm.py 158-160) against after the dense layer, and a
gated decoder's context quantized before its gate (quantized_opt.py 211) against after it.

python bench/w8a8_placements.py   (three seeds each; the ratio ‖new − old‖ / ‖old − float‖ of the logits)
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from degen_train.config import load_config  # noqa: E402
from degen_train.data.tokenizer import train_byte_bpe, train_wordpiece  # noqa: E402
from degen_train.metrics import quantization  # noqa: E402
from degen_train.models.backbone import build_hf_model  # noqa: E402

CORPUS = ["the cat sat on the mat and the dog sat on the log"] * 20
CASES = [  # (model preset, extra overrides, settings, the placement's switch)
    ("tiny", [], "encoder", "activation_quantized"),
    ("gpt2_tiny", ["objective=mle", "model.attention_variant.name=gated"], "decoder", "gate_after_context_quantizer"),
]


def quantized_logits(model: torch.nn.Module, ids: torch.Tensor, settings: quantization.QuantSettings) -> torch.Tensor:
    with quantization.simulated_w8a8(model, settings=settings) as finish_calibration, torch.no_grad():
        model(input_ids=ids)
        finish_calibration()
        return model(input_ids=ids).logits


def main() -> None:
    for preset, extra, kind, switch in CASES:
        cfg = load_config([f"model={preset}", *extra])
        train = train_byte_bpe if "gpt2" in preset else train_wordpiece
        tokenizer = train(iter(CORPUS), cfg.data.tokenizer)
        for seed in range(3):
            torch.manual_seed(seed)
            model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False, sequence_length=16).eval()
            for module in model.modules():  # a gate away from its initial value, as a trained one
                if hasattr(module, "attention_gate"):
                    for parameter in module.attention_gate.parameters():
                        torch.nn.init.normal_(parameter, std=1.0)
            ids = torch.randint(5, len(tokenizer), (8, 16), generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                exact = model(input_ids=ids).logits
            released = quantization.SETTINGS[kind]
            before = dataclasses.replace(released, **{switch: not getattr(released, switch)})
            new, old = quantized_logits(model, ids, released), quantized_logits(model, ids, before)
            ratio = float((new - old).norm() / (old - exact).norm())
            print(f"{preset} seed {seed}: {switch} as released moves the logits by {ratio:.2f} of the W8A8 error "
                  f"(max |new - old| {float((new - old).abs().max()):.3g}, max W8A8 error "
                  f"{float((old - exact).abs().max()):.3g})")  # fmt: skip


if __name__ == "__main__":
    main()
