"""degen_train: pretraining with anti-degeneration losses, and instruments for the degeneration.

The packages stand on nine levels, top to bottom; a package imports only along the arrows tests/unit/test_layers.py
lists, each to a lower level, and packages side by side on one level never import each other:

    cli: the commands: degen-train, -eval, -analyze, -report, -finetune, -convert, -reproduce
    report  reproduce  cluster: degen-report's tables and figures; make reproduce's runs and page; degen-cluster
    run: a run's life cycle: pretrain.train, build, the LightningModule, parallelism, resume, branch, export
    callbacks  evaluation: what watches a run; the instruments run on a model folder (degen-analyze, degen-eval)
    metrics  finetune: pure measurements (isotropy, outliers, quantization, probes); the GLUE grid
    losses  data: the loss terms, their contract and catalog; corpora, tokenizers, examples, the datamodule
    models: the six architectures, the backbone and its output, attention variants, generators
    config  storage: the run's settings (composition, the typed schema, handed-over files); what a run writes
    core  devices  optim: atomic writes and paths; collectives, threads, precision; optimizers and schedules
"""

from __future__ import annotations

__version__ = "0.1.0"
