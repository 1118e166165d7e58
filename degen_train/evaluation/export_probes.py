"""degen-eval MODEL [--sts FILE ...] [--wic DIR] [--perplexity FILE ...] [--w8a8 FILE] [--generate FILE] --out DIR:
STS (Spearman × 100), WiC accuracy, the perplexity (decoders) or pseudo-perplexity (encoders) of text files, the
W8A8 quantization gap (perplexity, and STS with --sts), and generation degeneration (decoders: each decoding's
repetition, diversity, coherence, MAUVE; evaluation/generation.py)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from degen_train.core.io import atomic_write_json
from degen_train.core.paths import writable_folder
from degen_train.metrics.encode import load_encoder, sentence_vectors, word_vectors
from degen_train.metrics.probe_versions import current_versions
from degen_train.metrics.probes import MODES, read_sts, read_wic, sts_scores, wic_scores

log = logging.getLogger("degen_train.eval")


def evaluate(
    model: str | Path,
    *,
    sts: Sequence[str | Path] = (),
    wic: str | Path | None = None,
    wic_fit: str | Path | None = None,
    sts_whitening_fit: Sequence[str | Path] = (),
    out: str | Path,
    layer: str | int = "last",
    pooling: str = "mean",
    batch_size: int = 32,
    max_length: int | None = None,
    limit: int | None = None,
    perplexity_files: Sequence[str | Path] = (),
    perplexity_unit: str = "line",
    stride: int | None = None,
    w8a8: str | Path | None = None,
    w8a8_placement: str = "released",
    generation: dict[str, Any] | None = None,
    lm_eval: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Score ``model`` on STS files, a WiC directory, the perplexity of text files, its W8A8 quantization gap on
    a text file, its generations (``generation``: evaluation.generation.generation_eval's keyword arguments) and
    lm-evaluation-harness tasks (``lm_eval``: evaluation.lm_eval_tasks.run_lm_eval's); writes OUT/eval.json and
    returns its content."""
    if not sts and wic is None and not perplexity_files and w8a8 is None and generation is None and lm_eval is None:
        raise ValueError("nothing to evaluate: give sts, wic, perplexity_files, w8a8, generation and/or lm_eval")
    if generation is not None or lm_eval is not None:  # an encoder refused before any file is read or model loaded
        from degen_train.evaluation.generation import require_decoder
        from degen_train.metrics.encode import model_folder

        require_decoder(model_folder(model), "--generate" if generation is not None else "--lm-eval")
    if not sts and wic is None and not perplexity_files and w8a8 is None:  # generation and/or lm-eval alone
        from degen_train.metrics.encode import model_folder

        result = {"model": str(model_folder(model))}
        writable_folder(out, "--out")
        return _with_decoder_measures(result, model, generation, lm_eval, out)
    if w8a8 is not None:  # a bad file or setting fails before any model is loaded
        from degen_train.metrics.perplexity import read_documents
        from degen_train.metrics.quantization import PLACEMENTS

        if w8a8_placement not in PLACEMENTS:
            raise ValueError(f"W8A8 placement {w8a8_placement!r} is not one of {', '.join(PLACEMENTS)}")

        read_documents(w8a8, perplexity_unit, what="W8A8 text file")
    if not sts and wic is None:  # perplexity alone needs no encoder: its LM head is loaded by itself
        result = _perplexity_only(model, perplexity_files, out, perplexity_unit, max_length, stride, limit)
        result = _with_w8a8(result, w8a8, None, perplexity_unit, out, w8a8_placement)
        return _with_decoder_measures(result, model, generation, lm_eval, out)
    # Read every input first: a bad file fails before the model is loaded.
    sts_sets = {Path(p).stem: read_sts(p) for p in sts}
    fit_sets = [read_sts(p, scored=False) for p in sts_whitening_fit]  # labels are not needed to fit
    wic_items = read_wic(wic) if wic is not None else None
    fit_items = read_wic(wic_fit) if wic_fit is not None else None
    log.info("degen-eval: loading %s", model)
    encoder = load_encoder(model, batch_size=batch_size, max_length=max_length)
    writable_folder(out, "--out")  # never through a link (core/paths.py)
    result: dict[str, Any] = {"model": str(encoder.source), "layer": layer, "pooling": pooling}
    fit = None
    if fit_sets and sts_sets:  # BERT-whitening's release: fitted on the named splits, both sides, repeats counted
        sentences = [s for pairs in fit_sets for s in pairs.first + pairs.second]
        fit = (sentence_vectors(encoder, sentences, layer=layer, pooling=pooling),
               " + ".join(str(p) for p in sts_whitening_fit) + " (both sides of every pair)")  # fmt: skip
    if sts_sets:
        result["sts"] = {}
        for name, pairs in sts_sets.items():
            if limit:
                pairs = type(pairs)(pairs.first[:limit], pairs.second[:limit], pairs.scores[:limit])
            log.info("degen-eval: STS %s, %d pairs (%s pooling, layer %s)", name, len(pairs.scores), pooling, layer)
            result["sts"][name] = sts_scores(
                pairs,
                lambda s: sentence_vectors(encoder, s, layer=layer, pooling=pooling),
                picture=Path(out) / f"{name}_pair_cosines.png",
                fit=fit,
            )
            # per pair, by the runs table's column: a report compares runs scored on these pairs, paired
            result.setdefault("items", {})[f"sts/{name}"] = result["sts"][name].pop("raw_items")
    if wic_items is not None:
        if limit:
            wic_items = type(wic_items)(wic_items.words[:limit], wic_items.positions[:limit], wic_items.labels[:limit])
        log.info("degen-eval: WiC, %d items%s", len(wic_items.labels), f" (fit on {wic_fit})" if fit_items else "")
        fit = (fit_items, wic_vectors(encoder, fit_items)) if fit_items is not None else None
        result["wic"] = wic_scores(wic_items, wic_vectors(encoder, wic_items), fit=fit)
        result.setdefault("items", {})["wic/accuracy"] = result["wic"].pop("raw_items")
    if perplexity_files:
        result["perplexity"] = _perplexities(
            encoder.source, perplexity_files, perplexity_unit, max_length, stride, limit
        )
    result["truncated_sequences"] = encoder.truncated
    result["probe_versions"] = current_versions()  # which probes measured these numbers (metrics/probe_versions.py)
    if encoder.truncated:
        log.warning("%d sequences were longer than %d tokens and were truncated", encoder.truncated, encoder.max_length)
    atomic_write_json(Path(out) / "eval.json", result)
    result = _with_w8a8(result, w8a8, sts[0] if sts else None, perplexity_unit, out, w8a8_placement)
    return _with_decoder_measures(result, model, generation, lm_eval, out)


def _with_decoder_measures(result: dict[str, Any], model: str | Path, generation: dict[str, Any] | None,
                           lm_eval: dict[str, Any] | None, out: str | Path) -> dict[str, Any]:  # fmt: skip
    """``result`` with a decoder's generations, then its lm-evaluation-harness tasks (each when asked)."""
    return _with_lm_eval(_with_generation(result, model, generation, out), model, lm_eval, out)


def _with_lm_eval(result: dict[str, Any], model: str | Path, options: dict[str, Any] | None,
                  out: str | Path) -> dict[str, Any]:  # fmt: skip
    """``result`` with the harness's results for the export (evaluation/lm_eval_tasks.py), rewritten to eval.json."""
    if options is None:
        return result
    from degen_train.evaluation.lm_eval_tasks import run_lm_eval
    from degen_train.metrics.encode import model_folder

    result["lm_eval"] = run_lm_eval(model_folder(model), **options)
    atomic_write_json(Path(out) / "eval.json", result)
    return result


def _with_generation(result: dict[str, Any], model: str | Path, generation: dict[str, Any] | None,
                     out: str | Path) -> dict[str, Any]:  # fmt: skip
    """``result`` with the model's generation measures (evaluation/generation.py), rewritten to eval.json."""
    if generation is None:
        return result
    from degen_train.evaluation.generation import generation_eval
    from degen_train.metrics.encode import model_folder

    result["generation"] = generation_eval(model_folder(model), **generation, out=out)
    # per prompt, by the runs table's column ("generation/DECODING/MEASURE"): runs drawn on the same prompts pair
    result.setdefault("items", {}).update(result["generation"].pop("items"))
    atomic_write_json(Path(out) / "eval.json", result)
    return result


def _with_w8a8(
    result: dict[str, Any],
    text: str | Path | None,
    sts_file: str | Path | None,
    unit: str,
    out: str | Path,
    placement: str = "released",
) -> dict[str, Any]:
    """``result`` with the W8A8 gap of its model on ``text`` (and on the first STS file), rewritten to eval.json."""
    if text is None:
        return result
    from degen_train.metrics.w8a8_probe import w8a8_gap_of_export

    log.info("degen-eval: W8A8 quantization gap on %s (%s placement; the released calibration)", text, placement)
    result["w8a8"] = w8a8_gap_of_export(result["model"], text, sts_file=sts_file, unit=unit, placement=placement)
    atomic_write_json(Path(out) / "eval.json", result)
    return result


def _perplexities(
    model_dir: Any, files: Sequence[str | Path], unit: str, window: int | None, stride: int | None, limit: int | None
) -> dict[str, dict]:
    from degen_train.metrics.perplexity import as_dict, perplexity

    scores = {}
    for path in files:
        log.info("degen-eval: perplexity of %s", path)
        scores[Path(path).stem] = as_dict(
            perplexity(model_dir, path, unit=unit, window=window, stride=stride, limit=limit)
        )
    return scores


def _perplexity_only(
    model: str | Path,
    files: Sequence[str | Path],
    out: str | Path,
    unit: str,
    window: int | None,
    stride: int | None,
    limit: int | None,
) -> dict[str, Any]:
    from degen_train.metrics.encode import model_folder
    from degen_train.metrics.perplexity import read_documents

    for path in files:  # a bad file fails before the model is loaded
        read_documents(path, unit)
    model_dir = model_folder(model)
    result: dict[str, Any] = {"model": str(model_dir)}
    if files:
        result["perplexity"] = _perplexities(model_dir, files, unit, window, stride, limit)
    writable_folder(out, "--out")  # never through a link (core/paths.py)
    atomic_write_json(Path(out) / "eval.json", result)
    return result


def wic_vectors(encoder: Any, items: Any) -> tuple[Any, Any]:
    """The target word's vector in each of the two examples of every item."""
    first = word_vectors(encoder, [w[0] for w in items.words], [p[0] for p in items.positions])
    second = word_vectors(encoder, [w[1] for w in items.words], [p[1] for p in items.positions])
    return first, second


def format_table(result: dict[str, Any]) -> str:
    lines = []
    if "generation" in result:
        from degen_train.evaluation.generation import format_generation

        lines += format_generation(result["generation"])
    if "lm_eval" in result:
        from degen_train.evaluation.lm_eval_tasks import format_lm_eval

        lines += format_lm_eval(result["lm_eval"])
    if "w8a8" in result:
        gap = result["w8a8"]
        what = "masked-LM perplexity" if gap["kind"] == "masked_lm_perplexity" else "perplexity"
        line = (
            f"W8A8: {what} {gap['float']['perplexity']:.4g} -> {gap['w8a8']['perplexity']:.4g} "
            f"(gap {gap['perplexity_gap']:+.4g}; {gap['scored_blocks']} blocks of {gap['block']} tokens)"
        )
        if "sts_gap" in gap:
            line += f"; STS {gap['float']['sts_spearman']:.2f} -> {gap['w8a8']['sts_spearman']:.2f}"
        lines.append(line + (f" [{gap['perplexity_note']}]" if "perplexity_note" in gap else ""))
    for name, scored in result.get("perplexity", {}).items():
        what = "pseudo-perplexity (Salazar et al. 2020)" if scored["kind"] == "pseudo_perplexity" else "perplexity"
        context = f"window {scored['window']}" + (f", stride {scored['stride']}" if scored["stride"] else "")
        lines.append(
            f"{name}: {what} {scored['value']:.4g} (NLL {scored['nll_per_token']:.4f}/token over {scored['tokens']} "
            f"tokens of {scored['documents']} documents; {context})"
        )
    if "sts" not in result and "wic" not in result:
        return "\n".join(lines)
    lines.append(f"{'task':<24}" + "".join(f"{m:>10}" for m in MODES) + f"{'n':>8}")
    for name, scores in result.get("sts", {}).items():
        lines.append(f"{'STS ' + name:<24}" + "".join(f"{scores[m]:>10.2f}" for m in MODES) + f"{scores['n']:>8}")
    if "wic" in result:
        wic = result["wic"]
        if "fitted_on" in wic:  # threshold fitted on another split: the honest number
            cells = "".join(f"{wic[m]['accuracy'] * 100:>10.2f}" for m in MODES)
            lines.append(f"{'WiC acc (t from fit)':<24}" + cells + f"{wic['n']:>8}")
        cells = "".join(f"{wic[m]['accuracy_threshold_fitted_on_scored_items'] * 100:>10.2f}" for m in MODES)
        lines.append(f"{'WiC acc (t on itself)':<24}" + cells + f"{wic['n']:>8}")
    return "\n".join(lines)
