"""degen-eval: STS, WiC, perplexity and the W8A8 gap of a model (library: degen_train/evaluation/export_probes.py)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from degen_train.evaluation import export_probes as library
from degen_train.evaluation.export_probes import evaluate, format_table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="degen-eval", description=library.__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("model", help="a degen_train run directory or an HF encoder directory")
    parser.add_argument("--sts", action="append", default=[], help="an STS file (repeatable)")
    parser.add_argument("--wic", help="a WiC directory (*.data.txt + *.gold.txt) to score")
    parser.add_argument(
        "--wic-fit", help="another WiC split: the threshold, whitening and outlier dims are fitted there (held out)"
    )
    parser.add_argument("--out", required=True, help="output directory for eval.json")
    parser.add_argument("--layer", default="last", help="last | first_last | a layer index (0 = embeddings)")
    parser.add_argument(
        "--pooling", default="mean", choices=["mean", "cls"], help="STS sentence vectors: token mean or [CLS]"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--limit", type=int, default=None, help="only the first N items of each set")
    parser.add_argument(
        "--perplexity",
        action="append",
        default=[],
        metavar="FILE",
        help="a text file (repeatable): perplexity for decoders (exact, windows of --max-length tokens), "
        "pseudo-perplexity for encoders (each token masked in turn: one forward pass per token)",
    )
    parser.add_argument(
        "--document-unit", default="line", choices=["line", "paragraph"], help="--perplexity's documents"
    )
    parser.add_argument("--stride", type=int, default=None, help="decoders: window step (default: the window)")
    parser.add_argument(
        "--w8a8",
        metavar="FILE",
        help="a text file: perplexity (and STS on the first --sts file) in float and under simulated W8A8 "
        "quantization as Bondarenko et al. 2023's released code runs it (encoders: BERT's validate_mlm.py, 16 "
        "batches of 32 blocks of 128 tokens calibrate; decoders: OPT's validate_clm.py, 4 batches of 8 blocks of "
        "512, 99.999th-percentile activation ranges, MSE weight ranges)",
    )
    parser.add_argument(
        "--w8a8-placement",
        default="released",
        choices=["released", "all"],
        help="where the quantizers sit: released (the vocabulary head and logits in float, residual sums "
        "quantized, as the paper's code) or all (the head quantized too, residual sums in float: the older placement)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    layer = int(args.layer) if args.layer.lstrip("-").isdigit() else args.layer
    try:
        result = evaluate(
            args.model,
            sts=args.sts,
            wic=args.wic,
            wic_fit=args.wic_fit,
            out=args.out,
            layer=layer,
            pooling=args.pooling,
            batch_size=args.batch_size,
            max_length=args.max_length,
            limit=args.limit,
            perplexity_files=args.perplexity,
            perplexity_unit=args.document_unit,
            stride=args.stride,
            w8a8=args.w8a8,
            w8a8_placement=args.w8a8_placement,
        )
    except (ValueError, FileNotFoundError) as error:
        parser.exit(2, f"degen-eval: error: {error}\n")
    print(format_table(result))


if __name__ == "__main__":
    main()
