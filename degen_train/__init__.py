"""degen_train: pretraining with anti-degeneration losses, and instruments for the degeneration.

The packages stand on eleven levels, top to bottom; a package imports only along the arrows tests/unit/test_layers.py
lists, each to a lower level, and packages side by side on one level never import each other. Each component
declares its typed config section beside its code (data/, models/, optim/, finetune/, losses/, evaluation/
section.py, callbacks/ and run/ sections.py), on the roles of core/roles.py: a leaf that imports only core/, which
config composes into the run's config whatever its package's level:

    cli: the commands: degen-train, -eval, -analyze, -report, -finetune, -convert, -reproduce
    report  reproduce  cluster: degen-report's tables and figures; make reproduce's runs and page; degen-cluster
    run: a run's life cycle: pretrain.train, build, the LightningModule, parallelism, resume, branch, export
    evaluation: the instruments run on a model folder (degen-analyze, degen-eval)
    config: the run's config composed of the components' sections, the Hydra tree, handed-over files, records
    callbacks: what watches a run, and its typed sections
    metrics  finetune: pure measurements (isotropy, outliers, quantization, probes); the GLUE grid
    losses  data: the loss terms, their contract and catalog; corpora, tokenizers, examples, the datamodule
    models: the six architectures, the backbone and its output, attention variants, generators
    storage  devices  optim: what a run writes; collectives, threads, precision; optimizers and schedules
    core: atomic writes and paths, the roles a setting declares and what every typed section shares
"""

from __future__ import annotations

__version__ = "0.1.0"
