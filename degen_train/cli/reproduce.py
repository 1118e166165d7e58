"""degen-reproduce [KEY=VALUE ...]: train, analyse and probe each method's runs, then write docs/reproduce/.
degen-reproduce summary [KEY=VALUE ...]: judge every claim again on the written pages' runs.csv, into
docs/reproduce.md's generated summary (also done after each page is written).

Settings: conf/reproduce.yaml, each changeable as KEY=VALUE (seeds=5 encoder=base steps.coco=50000 ...);
preset=NAME first takes conf/reproduce/NAME.yaml over it (preset=gao_scale: make reproduce-gao-scale).
Rerunning after a kill resumes the unfinished run and redoes nothing finished.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from omegaconf import DictConfig, OmegaConf  # noqa: E402

from degen_train.core.package_dir import config_dir  # noqa: E402

log = logging.getLogger("degen_train.reproduce")
PARTS = ("gao", "tacl", "coco", "luo", "simctg", "unlikelihood", "agg", "spectrum_control", "istar", "simcse",
         "muon", "muon_cosreg", "muon_encoder", "cosreg_cooldown", "glue", "clipped_softmax", "gated_attention",
         "output_gate", "positions", "simctg_generation")  # fmt: skip


def load_settings(overrides: Sequence[str]) -> DictConfig:
    """conf/reproduce.yaml with KEY=VALUE overrides; an unknown key or part is refused, naming the choices."""
    base = OmegaConf.load(config_dir() / "reproduce.yaml")
    OmegaConf.set_struct(base, True)
    OmegaConf.set_struct(base.glue.finetune, False)  # any key of conf/finetune.yaml; protocol_from refuses others
    layers = [OmegaConf.load(preset_file(o.split("=", 1)[1])) for o in overrides if o.startswith("preset=")]
    given = OmegaConf.from_dotlist([o for o in overrides if not o.startswith("preset=")])
    try:  # the presets (conf/reproduce/NAME.yaml) over the defaults, the command line's keys over both
        cfg = OmegaConf.merge(base, *layers, given)
    except Exception as error:  # noqa: BLE001 - OmegaConf's key errors, reworded
        raise ValueError(f"{str(error).splitlines()[0]}; keys: {', '.join(base.keys())}") from None
    unknown = set(cfg.parts) - set(PARTS)
    if unknown:
        raise ValueError(f"parts must be among {', '.join(PARTS)}; got parts={list(cfg.parts)}")
    if not str(cfg.seeds).isdigit() or not 1 <= int(cfg.seeds) <= MOST_SEEDS:
        raise ValueError(f"seeds={cfg.seeds}: a whole number from 1 to {MOST_SEEDS} (each seed runs every part "
                         f"once more)")  # fmt: skip
    return cfg


MOST_SEEDS = 100  # a reproduction of 100 seeds is weeks of this machine; more is a typo


def preset_file(name: str) -> Path:
    """conf/reproduce/NAME.yaml; an unknown name is refused, naming the presets."""
    known = sorted(p.stem for p in (config_dir() / "reproduce").glob("*.yaml"))
    if name not in known:
        raise ValueError(f"preset={name!r} is not one of {', '.join(known)} (conf/reproduce/)")
    return config_dir() / "reproduce" / f"{name}.yaml"


def reproduce(cfg: DictConfig) -> str:
    from degen_train.reproduce.runs import execute, plan, reference_model
    from degen_train.reproduce.write import write_page

    started, results = time.perf_counter(), []
    runs = plan(cfg)
    for index, run in enumerate(runs, 1):
        log.info("[%d/%d] %s / %s / seed %d", index, len(runs), run.part, run.variant, run.seed)
        results.append((run, execute(run, cfg)))
    minilm = reference_model(cfg) if {"luo", "glue", "clipped_softmax", "gated_attention"} & set(cfg.parts) else None
    page = write_page(cfg, results, minilm)
    log.info("wrote %s in %.1f min", page, (time.perf_counter() - started) / 60)
    if str(cfg.out) in cfg.summary.pages:
        write_summary(cfg)
    return str(page)


def write_summary(cfg: DictConfig) -> str:
    """docs/reproduce.md's generated summary, from the pages conf/reproduce.yaml's summary lists (those written)."""

    from degen_train.reproduce.claims import rewrite_summary

    pages = [(Path(folder), str(letters)) for folder, letters in cfg.summary.pages.items()
             if (Path(folder) / "runs.csv").is_file()]  # fmt: skip
    rewrite_summary(Path(str(cfg.summary.doc)), pages)
    return str(cfg.summary.doc)


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments and arguments[0] in ("-h", "--help"):
        print(__doc__)
        print(OmegaConf.to_yaml(OmegaConf.load(config_dir() / "reproduce.yaml")))
        return
    summary_only = bool(arguments) and arguments[0] == "summary"
    try:
        cfg = load_settings(arguments[1:] if summary_only else arguments)
        if summary_only:
            print(write_summary(cfg))
            return
    except ValueError as error:
        sys.exit(f"degen-reproduce: error: {error}")
    print(reproduce(cfg))


if __name__ == "__main__":
    main()
