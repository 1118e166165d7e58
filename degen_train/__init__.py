"""degen_train: pretraining with anti-degeneration losses, and instruments for the degeneration.

The packages, top to bottom (a package imports only from those below it; tests/unit/test_layers.py checks):

    cli/          the commands: degen-train, -eval, -analyze, -report, -finetune, -convert, -reproduce
    reproduce/    make reproduce: each paper's claims as runs, analyses and a page
    report/       degen-report: a sweep's tables and figures
    run/          a run's life cycle: pretrain.train, build, the LightningModule, parallelism, resume, branch, export
    evaluation/   degen-analyze and degen-eval: the instruments run on a model folder
    finetune/     degen-finetune: the GLUE grid and its protocols
    callbacks/    what watches a run: checkpoints, guards, throughput, isotropy, weight averages, preemption
    objectives/   the loss terms a model is trained on (MLM, NSP, MLE, ELECTRA, COCO-LM's CLM, AGG)
    regularizers/ the terms added to them (CosReg, TaCL, COCO-LM's SCL, SimCTG, unlikelihood, I-STAR, ...)
    metrics/      pure measurements: isotropy, outliers, quantization, probes, perplexity, plots
    data/         corpora, tokenizers, examples, collation, mixtures, the datamodule
    models/       the six architectures, the backbone, attention variants, generators
    config/       the run's settings: composition, a branch's inherited overrides, the typed schema, refusals
    terms/        the loss-term contract, each term's checked options, accumulation windows, the catalog
    optim/        optimizers and schedules: AdamW's groups, WSD, Muon
    storage/      what a run writes and reads back: checkpoints, the run lock and folder checks, own runs
    devices/      where a run computes: collectives, sharded reads, threads, precision, matmul peak, host reads
    core/         helpers every floor uses: atomic writes, the config folder, seeded draws, silenced noise

Modules that lived at the top before this layout (``degen_train.pretrain``, ``degen_train.schema``, ...) are still
importable under their old names: ``MOVED`` maps each to its place, and the finder below hands out the same module
object under both names (a recorded config's ``_target_: degen_train.optim.build_scheduler`` keeps working).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"

MOVED = {
    "accumulation": "terms.accumulation", "analyze": "evaluation.analyze", "branching": "run.branching",
    "build": "run.build", "catalog": "terms.catalog", "checkpoints": "storage.checkpoints",
    "collectives": "devices.collectives", "device_reads": "devices.device_reads", "evaluate": "evaluation.evaluate",
    "export": "run.export", "hub": "run.hub", "io": "core.io", "loggers": "run.loggers", "module": "run.module",
    "muon": "optim.muon", "overrides": "config.overrides", "own_runs": "storage.own_runs",
    "parallel": "run.parallel", "paths": "core.paths", "precision": "devices.precision",
    "pretrain": "run.pretrain", "provenance": "run.provenance", "quiet": "core.quiet", "resume": "run.resume",
    "rng": "core.rng", "run_table": "run.table", "runlock": "storage.runlock", "schema": "config.schema",
    "sharded_io": "storage.sharded_io", "step_check": "run.step_check", "sweep": "run.sweep",
    "term_options": "terms.options", "threads": "devices.threads", "types": "terms.types",
}  # fmt: skip


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import degen_train.OLD`` gives the module now at ``degen_train.NEW`` (the same object)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: object) -> object:
        return importlib.import_module(f"{__name__}.{MOVED[spec.name.rpartition('.')[2]]}")

    def exec_module(self, module: object) -> None:
        """The module was executed under its new name."""


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
