"""degen-convert's command line (the library: degen_train/cli/conversion.py): its arguments checked before torch
loads (issue 73.1)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

LIBRARY = "degen_train.cli.conversion"


def main(argv: Sequence[str] | None = None) -> None:
    from degen_train.core.source_reading import module_doc

    parser = argparse.ArgumentParser(
        prog="degen-convert", description=module_doc(LIBRARY), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source", type=Path, help="a checkpoint file, a sharded checkpoint folder, or a run directory")
    parser.add_argument("--ckpt", type=Path, help="write the one-file checkpoint here (resumable by any strategy)")
    parser.add_argument("--hf", type=Path, help="write an HF model folder here (AutoModel* loads it)")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer folder for --hf (default: the run's own)")
    args = parser.parse_args(argv)
    if args.ckpt is None and args.hf is None:  # said before torch loads
        parser.exit(2, "degen-convert: error: nothing to write: give --ckpt OUT.ckpt and/or --hf OUT_DIR\n")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    from degen_train.cli.conversion import convert

    try:
        written = convert(args.source, ckpt=args.ckpt, hf=args.hf, tokenizer=args.tokenizer)
    except (ValueError, OSError) as error:
        parser.exit(2, f"degen-convert: error: {error}\n")
    print(
        f"step {written['global_step']} of {written['source']} -> "
        + ", ".join(written[k] for k in ("ckpt", "hf") if k in written)
    )


if __name__ == "__main__":
    main()
