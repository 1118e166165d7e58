"""degen-analyze: the geometry of a run's export or any HF model (library: degen_train/evaluation/model_analysis.py)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from degen_train.core.arguments import parts_of, whole
from degen_train.core.source_reading import module_constant, module_doc

LIBRARY = "degen_train.evaluation.model_analysis"
SKIPPABLE = module_constant(LIBRARY, "SKIPPABLE")  # from its source: the command line is checked before torch loads


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="degen-analyze", description=module_doc(LIBRARY), formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("path", help="a degen_train run directory or an HF model directory")
    parser.add_argument("--out", help="output directory (default: PATH/analysis)")
    parser.add_argument("--corpus", help="a text file, one sentence per line (default: the run's validation text)")
    parser.add_argument(
        "--trust-config", action="store_true", help="read the corpus the run's config names even outside the folder"
    )
    parser.add_argument("--pairs", help="an STS file (sentence, sentence, score): alignment and uniformity of [CLS]")
    parser.add_argument("--max-sentences", type=whole(1, 10_000_000), default=1000)
    parser.add_argument("--batch-size", type=whole(1, 65_536), default=32)
    parser.add_argument("--skip", default="", type=parts_of(SKIPPABLE),
                        help="comma-separated parts to leave out, of " + ", ".join(SKIPPABLE))  # fmt: skip
    parser.add_argument("--generation-prompts", type=whole(1, 1_000_000), default=200,
                        help="a decoder's greedy continuations (Welleck et al. 2020's 200)")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    from degen_train.evaluation.model_analysis import analyze  # after the command line holds

    try:
        result = analyze(
            args.path,
            out=args.out,
            corpus=args.corpus,
            max_sentences=args.max_sentences,
            batch_size=args.batch_size,
            trust_config=args.trust_config,
            pairs=args.pairs,
            skip=args.skip,
            generation_prompts=args.generation_prompts,
        )
    except (ValueError, FileNotFoundError) as error:
        parser.exit(2, f"degen-analyze: error: {error}\n")
    except OSError as error:  # a full disk, a file-size limit (ulimit -f), a quota: one line naming the folder
        from degen_train.core.io import as_write_limit

        folder = Path(args.out) if args.out else Path(args.path) / "analysis"
        limit = as_write_limit(error, folder, "give --out a folder on another disk")
        if limit is None:
            raise
        parser.exit(2, f"degen-analyze: error: {limit}\n")
    embedding, last = result["embedding"], result["layers"][-1]
    print(
        f"embedding rows: mean cosine {embedding['mean_cosine']:.4f}, IsoScore {embedding['isoscore']:.4f}, "
        f"outlier dims {embedding['outlier_dims']}"
    )
    print(
        f"last layer: mean cosine {last['mean_cosine']:.4f} (whitened {last['mean_cosine_whitened']:.4f}, "
        f"clipped {last['mean_cosine_clipped']:.4f}), TaCL's self-similarity "
        f"{last['tacl_self_similarity']:.4f}, Ethayarajh's {last['word_self_similarity']:.4f}"
    )
    pairs = result.get("sentence_pairs")
    if pairs:
        print(f"[CLS] of {pairs['file']}: alignment {pairs['alignment']:.4f} ({pairs['similar_pairs']} pairs scored "
              f"above {pairs['similar_above_score']:g}), uniformity {pairs['uniformity']:.4f} ({2 * pairs['pairs']} "
              f"sentences)")  # fmt: skip
    for line in outlier_lines(result.get("outliers") or {}):
        print(line)
    print(f"wrote {Path(args.out) if args.out else Path(args.path) / 'analysis'}")


def outlier_lines(outliers: dict) -> list[str]:
    """The outlier numbers, each with the tensor it was read from (metrics/outlier_sites.py)."""
    if "max_kurtosis" not in outliers:
        return []
    lines = [f"outliers on {outliers['input']} ({outliers['protocol']}'s released sites):",
             f"  max kurtosis {outliers['max_kurtosis']:.1f} at {outliers['max_kurtosis_at']} "
             f"(mean over sites {outliers['avg_kurtosis']:.1f})",
             f"  max ∞-norm {outliers['max_inf_norm']:.1f} at {outliers['max_inf_norm_at']}"]  # fmt: skip
    if outliers["protocol"] == "bert":
        lines.append(f"  max ∞-norm of the FFN outputs {outliers['max_ffn_out_inf_norm']:.1f}, of the residual sums "
                     f"(LayerNorm inputs) {outliers['max_LN_inp_inf_norm']:.1f}, of the LayerNorm outputs "
                     f"{outliers['max_LN_out_inf_norm']:.1f}")  # fmt: skip
    else:
        lines.append(f"  max ∞-norm of the FFN outputs {outliers['max_ffn_inf_norm']:.1f}, of the layers' outputs "
                     f"(before the final norm) {outliers['max_layer_inf_norm']:.1f}")  # fmt: skip
    if outliers.get("attention_sink_windows"):
        lines.append(f"  attention sinks: {outliers['attention_sink_rate']:.1f}% of heads (ε = 0.3) on "
                     f"{outliers['attention_sink_windows']} windows of 64 tokens")  # fmt: skip
    lines.append(f"  massive activations (Sun et al.) in the blocks' outputs: {outliers['massive_activations']}")
    return lines


if __name__ == "__main__":
    main()
