"""The quantization gap of an export: its perplexity (and STS) in float and under simulated W8A8 (quantization.py).

Text is read as Bondarenko et al. feed it: the documents' tokens joined into one stream and cut into blocks. The
first batches of blocks calibrate the activation ranges; the blocks after them are scored. Encoders follow the
released BERT validation (``validate_mlm.py``: 128-token blocks, 16 calibration batches of 32, calibrated on the
masked inputs it scores) and are scored by masked-LM perplexity with a fixed mask (15% of each block's tokens, all
[MASK], drawn from ``seed``: the same positions in float and in W8A8); decoders follow the released OPT validation
(``validate_clm.py``: 512-token blocks, 4 calibration batches of 8, MSE weight ranges, the 99.999th percentile for
activations), scored by the perplexity of every block's next tokens. The head and the logits stay in float
(``placement=released``; ``all`` quantizes them too, the first placement of this project).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from degen_train.core.handed_files import no_remote_code
from degen_train.metrics.perplexity import causal_perplexity
from degen_train.metrics.probe_versions import PROBES
from degen_train.metrics.quantization import SETTINGS, QuantSettings, simulated_w8a8

MASK_RATE = 0.15


def token_blocks(tokenizer: Any, documents: list[str], block: int) -> list[list[int]]:
    """The documents' tokens (each followed by the end-of-text token where the tokenizer has one) cut into blocks."""
    stream: list[int] = []
    end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    for document in documents:
        stream += tokenizer(document, add_special_tokens=False, verbose=False)["input_ids"] + (
            [end] if end is not None else []
        )
    return [stream[i : i + block] for i in range(0, len(stream) - block + 1, block)]


def _encoder_input(tokenizer: Any, blocks: list[list[int]]) -> Tensor:
    """[CLS] block [SEP] for a BERT-family tokenizer: (N, block + 2)."""
    first = [tokenizer.cls_token_id] if tokenizer.cls_token_id is not None else []
    last = [tokenizer.sep_token_id] if tokenizer.sep_token_id is not None else []
    return torch.tensor([first + ids + last for ids in blocks])


def fixed_masks(ids: Tensor, special: set[int], seed: int, rate: float = MASK_RATE) -> Tensor:
    """(N, T) bool: ``rate`` of each row's non-special positions (at least one), the same for a given seed."""
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.zeros_like(ids, dtype=torch.bool)
    for row in range(ids.size(0)):
        candidates = torch.tensor([i for i, t in enumerate(ids[row].tolist()) if t not in special])
        count = max(1, round(rate * len(candidates)))
        chosen[row, candidates[torch.randperm(len(candidates), generator=generator)[:count]]] = True
    return chosen


def masked_lm_nll(
    model: Any, tokenizer: Any, blocks: list[list[int]], *, seed: int, batch_size: int
) -> tuple[float, int]:
    """(Σ −log p(w_t | masked block), masked tokens) over fixed masks."""
    ids = _encoder_input(tokenizer, blocks)
    masked = fixed_masks(ids, set(tokenizer.all_special_ids), seed)
    inputs = ids.masked_fill(masked, tokenizer.mask_token_id)
    device = next(model.parameters()).device
    total = 0.0
    for start in range(0, len(ids), batch_size):
        rows = slice(start, start + batch_size)
        with torch.no_grad():
            logits = model(input_ids=inputs[rows].to(device)).logits.float().cpu()
        log_probs = logits[masked[rows]].log_softmax(dim=-1)
        total -= float(log_probs.gather(1, ids[rows][masked[rows]][:, None]).sum())
    return total, int(masked.sum())


def enough_blocks(tokenizer: Any, documents: list[str], *, decoder: bool, settings: QuantSettings) -> list:
    """The text's blocks, refused (naming how much text is needed) when too few remain to score after calibration:
    checked before training too (pretrain), so a short eval.w8a8 file fails in seconds, not after the run."""
    blocks = token_blocks(tokenizer, documents, settings.block - (0 if decoder else 2))
    enough_tokens(len(blocks) * settings.block, settings=settings)
    return blocks


def enough_tokens(tokens: int, *, settings: QuantSettings) -> None:
    """Refuse a text of ``tokens`` tokens that cannot fill the calibration batches and one more block."""
    blocks, calibration = tokens // settings.block, settings.calibration_batches * settings.batch_size
    if blocks <= calibration:
        needed = (calibration + 1) * settings.block
        raise ValueError(
            f"the text has {'at most ' if tokens % settings.block else ''}{blocks} blocks of {settings.block} tokens: "
            f"{settings.calibration_batches} batches of {settings.batch_size} calibrate the activation ranges "
            f"({settings.name}'s released setting) and at least one more is scored (give a file of more than "
            f"{needed} tokens)"
        )


def w8a8_gap(
    model: Any,
    tokenizer: Any,
    documents: list[str],
    *,
    decoder: bool,
    settings: QuantSettings | None = None,
    placement: str = "released",
    limit_blocks: int | None = None,
    seed: int = 0,
    sts: Any = None,
    sts_encode: Any = None,
) -> dict[str, Any]:
    """Perplexity (and, with ``sts`` pairs and an ``sts_encode`` function, STS Spearman) in float and in W8A8."""
    settings = settings or SETTINGS["decoder" if decoder else "encoder"]
    blocks = enough_blocks(tokenizer, documents, decoder=decoder, settings=settings)
    calibration = blocks[: settings.calibration_batches * settings.batch_size]
    scored = blocks[len(calibration) :][:limit_blocks]
    scoring_batch = 1 if decoder else settings.batch_size  # the released OPT validation scores one block at a time

    def score() -> dict[str, float]:
        if decoder:
            stream = [token for ids in scored for token in ids]  # window = stride = block: each block's own tokens
            total, count = causal_perplexity(
                model, stream, window=len(scored[0]), stride=len(scored[0]), batch_size=scoring_batch
            )
        else:
            total, count = masked_lm_nll(model, tokenizer, scored, seed=seed, batch_size=scoring_batch)
        result = {"perplexity": math.exp(total / count), "nll_per_token": total / count, "tokens": count}
        if sts is not None and sts_encode is not None:
            from degen_train.metrics.probes import sts_scores

            result["sts_spearman"] = sts_scores(sts, sts_encode)["raw"]
        return result

    model.eval()
    baseline = score()
    device = next(model.parameters()).device
    with simulated_w8a8(model, placement=placement, settings=settings) as finish_calibration:
        for start in range(0, len(calibration), settings.batch_size):
            batch = calibration[start : start + settings.batch_size]
            inputs = torch.tensor(batch) if decoder else masked_input(tokenizer, batch, seed=seed + 1)
            with torch.no_grad():
                model(input_ids=inputs.to(device))
        finish_calibration()
        quantized = score()
    result: dict[str, Any] = {
        "kind": "perplexity" if decoder else "masked_lm_perplexity",
        "setting": settings.name,
        "placement": placement,
        "float": baseline,
        "w8a8": quantized,
        "perplexity_gap": quantized["perplexity"] - baseline["perplexity"],
        "calibration_blocks": len(calibration),
        "scored_blocks": len(scored),
        "block": settings.block,
        "probe_versions": {"w8a8": PROBES["w8a8"].version},  # metrics/probe_versions.py
    }
    if "sts_spearman" in baseline:
        result["sts_gap"] = quantized["sts_spearman"] - baseline["sts_spearman"]
    return result


def masked_input(tokenizer: Any, blocks: list[list[int]], *, seed: int) -> Tensor:
    """[CLS] block [SEP] with 15% of the tokens [MASK]ed (fixed by ``seed``): what the released BERT validation
    calibrates on (its evaluation loader's masked batches)."""
    ids = _encoder_input(tokenizer, blocks)
    return ids.masked_fill(fixed_masks(ids, set(tokenizer.all_special_ids), seed), tokenizer.mask_token_id)


def w8a8_gap_of_export(
    model_dir: str | Path,
    text: str | Path,
    *,
    sts_file: str | Path | None = None,
    unit: str = "line",
    placement: str = "released",
    limit_blocks: int | None = 64,
    settings: QuantSettings | None = None,
) -> dict[str, Any]:
    """``w8a8_gap`` of the export in ``model_dir`` on the text file ``text`` (documents per ``unit``); ``settings``
    default to the released ones of the model's family (BERT's for encoders, OPT's for decoders)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    from degen_train.data.tokenizer import load_tokenizer
    from degen_train.metrics.encode import Encoder, sentence_vectors
    from degen_train.metrics.perplexity import read_documents
    from degen_train.models.architectures import architecture_of
    from degen_train.models.loading import load_pretrained

    documents = read_documents(text, unit, what="W8A8 text file")
    tokenizer = load_tokenizer(model_dir)
    arch = architecture_of(AutoConfig.from_pretrained(str(model_dir), **no_remote_code(model_dir)).model_type)
    decoder = arch is not None and arch.family == "decoder"
    if not decoder and tokenizer.mask_token_id is None:
        raise ValueError(f"{model_dir}'s tokenizer has no mask token: the masked-LM perplexity needs one")
    loader = AutoModelForCausalLM if decoder else AutoModelForMaskedLM
    untrained: list[str] = []
    model = load_pretrained(loader, str(model_dir), "W8A8 probe model", missing=untrained).eval()
    longest = int(getattr(model.config, "max_position_embeddings", 512) or 512)
    sts, encode = None, None
    if sts_file is not None and not decoder:
        from degen_train.metrics.probes import read_sts

        sts = read_sts(sts_file)
        encoder = Encoder(model.base_model, tokenizer, Path(model_dir), min(longest, 512), 32)

        def encode(sentences: list[str]) -> Tensor:
            return sentence_vectors(encoder, sentences)

    settings = settings or SETTINGS["decoder" if decoder else "encoder"]
    if settings.block > longest:  # a model with fewer positions than the released blocks: its longest block
        settings = dataclasses.replace(settings, block=longest)
    result = w8a8_gap(
        model,
        tokenizer,
        documents,
        decoder=decoder,
        settings=settings,
        placement=placement,
        limit_blocks=limit_blocks,
        sts=sts,
        sts_encode=encode,
    )
    if untrained:  # e.g. a sentence-embedding model saved without its MLM head: its perplexity means nothing
        result["untrained_weights"] = sorted(untrained)
        result["perplexity_note"] = "the LM head was not in the checkpoint (newly initialised): compare the STS gap"
    return result
