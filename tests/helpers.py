"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, BertForMaskedLM

from degen_train.config import load_config
from degen_train.models.backbone import Backbone
from degen_train.run.pretrain import train
from degen_train.storage.checkpoints import load_checkpoint_file
from tests.conftest import FAST


def run(run_dir: Path, *overrides: str) -> dict[str, Any]:
    """Train in-process with the fast settings plus ``overrides``; returns summary.json's content."""
    return train(load_config([*FAST, *overrides], run_dir=run_dir))


def logged(run_dir: Path, key: str) -> dict[int, float]:
    """{step: value} of one metric in RUN/logs/metrics.csv."""
    with open(run_dir / "logs" / "metrics.csv", newline="") as handle:
        return {int(r["step"]): float(r[key]) for r in csv.DictReader(handle) if r.get(key)}


def checkpoint_weights(path: Path) -> dict[str, torch.Tensor]:
    """The whole weights of a checkpoint file, or of a sharded checkpoint folder (gathered); a module's extra
    state (a dict of tensors, numbers or lists: AGG's window) flattened into ``KEY.NAME`` entries, compared like
    weights."""
    flat: dict[str, torch.Tensor] = {}
    for key, value in load_checkpoint_file(path)["state_dict"].items():
        items = value.items() if isinstance(value, dict) else [("", value)]
        flat.update({f"{key}.{name}" if name else key: _as_tensor(v) for name, v in items})
    return flat


def _as_tensor(value: object) -> torch.Tensor:
    """A tensor, a number or a (ragged) list of lists of numbers as one tensor, lengths first."""
    if isinstance(value, list) and all(isinstance(row, list) for row in value):
        return torch.tensor([len(row) for row in value] + [x for row in value for x in row], dtype=torch.float64)
    return torch.as_tensor(value)


COMMANDS = {"degen-train": "degen_train.cli.train", "degen-eval": "degen_train.cli.evaluate",
            "degen-analyze": "degen_train.cli.analyze", "degen-report": "degen_train.cli.report",
            "degen-reproduce": "degen_train.cli.reproduce", "degen-convert": "degen_train.cli.convert",
            "degen-finetune": "degen_train.cli.finetune", "degen-cluster": "degen_train.cli.cluster"}  # fmt: skip


def command(name: str, *args: str) -> subprocess.CompletedProcess:
    """The console script ``name`` run in this process, as a shell runs it (its ``main()`` with ``sys.argv``): its exit
    code, stdout and stderr. For a test whose subject is what a command says or does; where the process itself is
    the subject (signals, kills, ranks, a second writer, a multirun, a fresh interpreter), ``degen_train()``."""
    import contextlib
    import importlib
    import io
    import logging
    from unittest import mock

    for logger in (logging.getLogger(), logging.getLogger("degen_train")):  # a fresh process has no earlier run's
        for handler in [h for h in logger.handlers if isinstance(h, logging.FileHandler)]:  # train.log open
            logger.removeHandler(handler)
            handler.close()
    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    main = importlib.import_module(COMMANDS[name]).main
    streams = contextlib.redirect_stdout(out), contextlib.redirect_stderr(err)
    with mock.patch.object(sys, "argv", [name, *args]), streams[0], streams[1]:
        try:
            main()
        except SystemExit as exited:
            code = exited.code
    if isinstance(code, str):  # sys.exit("message"): the interpreter prints it and exits 1
        err.write(code + "\n")
        code = 1
    return subprocess.CompletedProcess([name, *args], int(code or 0), out.getvalue(), err.getvalue())


def degen_train(*args: str) -> subprocess.CompletedProcess:
    """The installed ``degen-train`` command in a subprocess (DDP and multirun need a real process)."""
    command = [str(Path(sys.executable).parent / "degen-train"), *args]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ}, timeout=780)


def on_two_processes(
    runs: list[tuple[Path, list[str]]], *, timeout: float = 780, seconds_per_update: dict[str, float] | None = None
) -> None:
    """Train every run (its folder and overrides; a folder twice: a resume) on one two-process job, in order, as
    ``torchrun --nproc-per-node 2 degen-train`` would, but paying the interpreter's start and the imports (~7 s a
    process here, more than a tiny run's training) once for them all. Raises with both ranks' output tails.
    ``seconds_per_update``: {rank: seconds}, a clock of the test's own for callbacks.cadence on each rank."""
    import json
    import socket
    import tempfile
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    scratch = Path(tempfile.mkdtemp(prefix="two_processes_"))
    spec = scratch / "runs.json"
    clock = {"seconds_per_update": seconds_per_update} if seconds_per_update else {}
    spec.write_text(json.dumps([{"run_dir": str(d), "overrides": list(o), **clock} for d, o in runs]))
    launcher = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2", "NODE_RANK": "0"}
    ranks = []
    for rank in range(2):
        log = open(scratch / f"rank{rank}.log", "w")  # noqa: SIM115 - closed below
        env = {**os.environ, **launcher, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        command = [sys.executable, "-m", "tests.two_process_driver", str(spec)]
        ranks.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p, _ in ranks) and time.monotonic() < deadline:
        if any(p.poll() not in (None, 0) for p, _ in ranks):  # one rank failed: its partner would wait forever
            break
        time.sleep(0.2)
    for process, log in ranks:
        if process.poll() is None:
            process.kill()
        process.wait()
        log.close()
    if any(p.returncode for p, _ in ranks):
        tails = "\n".join(f"--- rank {r} ---\n" + (scratch / f"rank{r}.log").read_text()[-4000:] for r in range(2))
        raise AssertionError(f"two-process job failed (exit codes {[p.returncode for p, _ in ranks]}):\n{tails}")


def forward_output(
    *,
    logits: torch.Tensor | None = None,
    targets: torch.Tensor | None = None,
    hidden_states: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    input_ids: torch.Tensor | None = None,
    **extra: Any,
) -> Any:
    """A hand-made ForwardOutput for a term's unit test: a vocabulary of 3 with 2-dim identity embeddings.
    Give ``logits`` and ``targets`` (a head's test: one sequence of len(targets) predicted tokens) or
    ``hidden_states``, ``attention_mask`` and ``input_ids`` (a states test: nothing predicted)."""
    from degen_train.models.output import ForwardOutput

    if targets is not None:  # one sequence whose every position is predicted
        input_ids = torch.zeros(1, len(targets), dtype=torch.long)
        attention_mask = torch.ones(1, len(targets), dtype=torch.long)
        hidden_states = torch.zeros(1, len(targets), 2) if hidden_states is None else hidden_states
        labels = targets[None]
    else:
        labels = torch.full_like(input_ids, -100)
        targets = labels[labels != -100]
    return ForwardOutput(
        input_ids=input_ids,
        attention_mask=attention_mask,
        hidden_states=hidden_states,
        labels=labels,
        logits=logits,
        target_ids=targets,
        embedding_weight=torch.eye(3, 2),
        output_embedding_weight=torch.eye(3, 2),
        **extra,
    )


# Two-process equality (tests/test_ddp.py, test_fsdp.py, test_muon.py): the settings, the runs, the comparison.
SAME_RUN_SETTINGS = [
    *FAST,
    "model.dropout=0",
    "model.attention_dropout=0",
    "trainer.accelerator=cpu",
    "trainer.max_steps=6",
    "trainer.val_check_interval=3",
    "export_hf=false",
]


def cli_run(run_dir: Path, *overrides: str) -> None:
    result = degen_train(*SAME_RUN_SETTINGS, *overrides, f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]


def one_process_run(run_dir: Path, *overrides: str) -> None:
    """The one-process reference, in this process (the same config as ``cli``, without a process start), with one
    CPU thread as each of the two processes has (threads=auto gives each 1 of the 2 CPUs): LAPACK's results (the
    SVD of spectrum control) depend on the thread count beyond 1e-5."""
    run(run_dir, *SAME_RUN_SETTINGS[len(FAST) :], *overrides, "threads=1")


def assert_same_run(ddp: Path, one: Path, keys: tuple[str, ...]) -> None:
    for key in keys:
        a, b = logged(ddp, key), logged(one, key)
        assert a.keys() == b.keys() and all(abs(a[s] - b[s]) < 1e-4 for s in a), (key, a, b)
    a = checkpoint_weights(ddp / "checkpoints" / "last.ckpt")
    b = checkpoint_weights(one / "checkpoints" / "last.ckpt")
    assert max((a[k].float() - b[k].float()).abs().max().item() for k in a) <= 1e-5


# Architectures beyond BERT and GPT-2, for the DDP and the FSDP2 tests: ModernBERT (RoPE, GeGLU, local attention)
# with CosReg on its tied embeddings; Llama (grouped-query attention, SwiGLU) with CosReg on its untied output layer.
BEYOND_BERT_AND_GPT2 = {
    "modernbert_cosreg": (
        ["recipe=bert_mlm", "regularizer=cosreg", "model=modernbert_tiny"],
        ("train/cosreg/loss", "train/mlm/loss"),
    ),
    "llama_cosreg": (["recipe=gao_cosreg", "model=llama_tiny"], ("train/cosreg/loss", "train/mle/loss")),
}


# A 3-layer BERT backbone and a masked batch by hand (tests/unit: corruption, fidelity, the contract).
def tiny_backbone() -> Backbone:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30,
        hidden_size=16,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return Backbone(BertForMaskedLM(config))


def masked_batch() -> dict:
    original = torch.tensor([[2, 7, 8, 9, 10, 3], [2, 11, 12, 13, 3, 0]])
    mask = (original != 0).long()
    labels = torch.full_like(original, -100)
    labels[0, 2], labels[1, 1], labels[1, 3] = 8, 11, 13
    inputs = torch.where(labels != -100, torch.full_like(original, 4), original)
    return {
        "input_ids": inputs,
        "original_ids": original,
        "attention_mask": mask,
        "labels": labels,
        "sample_seed": torch.tensor([11, 12]),
    }


def resume_settings(corpus: Path) -> list[str]:
    """A small text corpus, checkpoints and validation every 3 steps, no export: the resume tests' runs."""
    return [
        "data=text",
        f"data.path={corpus}",
        "data.tokenizer.vocab_size=1000",
        "trainer.val_check_interval=3",
        "callbacks.checkpoint.every_n_train_steps=3",
        "export_hf=false",
    ]


def write_file(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path


def tiny_rte(root: Path, rows: int = 16) -> Path:
    header = "index\tsentence1\tsentence2\tlabel\n"
    body = "".join(f"{i}\tthe cat {i} sleeps on the mat\ta cat {'sleeps' if i % 2 else 'runs'}\t"
                   f"{'entailment' if i % 2 else 'not_entailment'}\n" for i in range(rows))  # fmt: skip
    write_file(root / "RTE" / "train.tsv", header + body)
    write_file(root / "RTE" / "dev.tsv", header + body)
    return root


def finished_run(folder: Path, name: str, override: str, loss: float = 4.0) -> Path:
    """A finished run's records, as run/pretrain.py writes them (no training: the report reads files only)."""
    run = folder / name
    (run / "logs").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "overrides.json").write_text(json.dumps([override]))
    summary = {"config": {"objective": {"mlm": {"weight": 1.0}}}, "final_step": 4, "val_loss": loss,
               "val_terms": {"mlm": loss}, "val_perplexity": 50.0,
               "isotropy": {"isotropy/embedding/mean_cosine": 0.3}}  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "logs" / "metrics.csv").write_text("step,train/loss,val/mlm/loss\n0,5.0,\n3,4.5,4.0\n")
    return run


# Issue 70.4: the two-process cases of the terms nobody wrote a case for, derived from what each term declares.
def terms_configured(overrides: list[str]) -> set[str]:
    """The loss terms a case's overrides configure: its recipe's objective and regularizer groups (read from
    conf/), the groups it chooses, and every term it sets an option of."""
    from omegaconf import OmegaConf

    from degen_train.core.package_dir import config_dir

    conf, groups = config_dir(), {}
    for override in overrides:
        key, _, value = override.partition("=")
        if key == "recipe":
            for entry in OmegaConf.load(conf / "recipe" / f"{value}.yaml").get("defaults", []):
                for group, choice in (entry.items() if hasattr(entry, "items") else []):
                    groups[str(group).removeprefix("override /")] = str(choice)
    for override in overrides:
        key, _, value = override.partition("=")
        if key in ("objective", "regularizer"):
            groups[key] = value
    found = {part.split(".")[1] for part in overrides if part.startswith(("objective.", "regularizer."))}
    for group, choice in groups.items():
        if group in ("objective", "regularizer") and choice not in ("none", "null"):
            found |= set(OmegaConf.load(conf / group / f"{choice}.yaml") or {})
    return found


def derived_cases(cases: dict[str, tuple[list[str], tuple[str, ...]]]) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """Issue 70.4: every term whose mean spans samples or shards (it declares ``averages_over`` or sets
    ``mixes_samples``: losses/declarations.py, read from its file) and that no case above configures gets its own
    case, derived from its declaration: its yaml on a recipe of its family. A new term that averages over the global
    batch is put to the two-process test without anyone writing it here."""
    from degen_train.losses.declarations import declared_terms

    covered = {term for overrides, _ in cases.values() for term in terms_configured(overrides)}
    derived = {}
    for name, term in sorted(declared_terms().items()):
        if not (term.averages_over or term.mixes_samples) or name in covered:
            continue
        recipe = ["recipe=gpt2_mle", "model=gpt2_tiny"] if term.family == "decoder" else ["recipe=bert_mlm"]
        objective = "mle" if term.family == "decoder" else "mlm"
        chosen = f"{term.section}={name}" if term.section == "regularizer" else f"objective={name}"
        derived[f"{name}_derived"] = ([*recipe, chosen], (f"train/{name}/loss", f"train/{objective}/loss"))
    return derived
