"""FSDP2 on two CPU processes (gloo) gives the losses and the weights of one process holding the global batch."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.helpers import (
    BEYOND_BERT_AND_GPT2,
    SAME_RUN_SETTINGS,
    assert_same_run,
    checkpoint_weights,
    cli_run,
    derived_cases,
    logged,
    on_two_processes,
    one_process_run,
)

CASES = {
    # bert_mlm: the resume tests below compare 2-process runs with one process straight.
    "bert_mlm_nsp": (["recipe=bert_mlm_nsp", "model=tiny"], ("train/mlm/loss", "train/nsp/loss")),
    # The chunked output layer on a tied decoder, and CosReg on the tied (sharded) embedding matrix.
    "gpt2_mle": (["recipe=gpt2_mle", "model=gpt2_tiny"], ("train/mle/loss", "val/loss")),
    # CosReg shard-wise, here on the rows any process has seen so far: each shard picks its rows of the mask.
    "gao_cosreg": (
        ["recipe=gao_cosreg", "model=gpt2_tiny", "regularizer.cosreg.rows=seen"],
        ("train/cosreg/loss", "train/mle/loss", "train/cosreg/rows"),
    ),
    # The same with the vocabulary padded to 64 (1,000 -> 1,024 rows): each shard leaves the padded rows out.
    "gao_cosreg_padded": (
        ["recipe=gao_cosreg", "model=gpt2_tiny", "model.pad_vocab_to_multiple_of=64"],
        ("train/cosreg/loss", "train/mle/loss", "train/cosreg/rows"),
    ),
    "coco_lm": (
        ["recipe=coco_lm", "model=tiny", "regularizer.coco_scl.gather_negatives=true"],
        ("train/coco_scl/loss", "train/loss"),
    ),
    "electra": (["recipe=electra", "model=tiny"], ("train/electra/loss", "train/electra/detection")),
    # Units ModernBertEncoderLayer / LlamaDecoderLayer, from the classes themselves.
    **BEYOND_BERT_AND_GPT2,
    # torch.compile of every block (model.compile=true), with the process group's hooks around them.
    "compiled": (["recipe=bert_mlm", "model=tiny", "model.compile=true"], ("train/mlm/loss", "val/loss")),
    # Activation checkpointing inside the compiled blocks, FSDP2's hooks gathering each block around its recomputation.
    "checkpointed_compiled": (["recipe=gpt2_mle", "model=gpt2_tiny", "model.compile=true",
                               "model.activation_checkpointing=full"], ("train/mle/loss", "val/loss")),  # fmt: skip
    # Gated attention: each block's gates sharded with it, fed the block's attention input by a pre-hook.
    "gated_attention": (["recipe=bert_mlm", "model=tiny", "model.attention_variant.name=gated"], ("train/mlm/loss",)),
    "clipped_softmax": (["recipe=bert_mlm", "model=tiny", "model.attention_variant.name=clipped_softmax",
                         "model.attention=eager"], ("train/mlm/loss",)),  # fmt: skip
    "output_gate": (["recipe=gpt2_mle", "model=llama_tiny", "model.attention_variant.name=output_gate"],
                    ("train/mle/loss",)),  # fmt: skip
    "kv_bias": (["recipe=gpt2_mle", "model=llama_tiny", "model.attention_variant.name=kv_bias"], ("train/mle/loss",)),
}
# Terms whose global-batch means test_ddp.py's hand-written cases hold to one process and FSDP2's do not yet (their
# FSDP2 runs were never measured here; tacl has its own case below, with its teacher); every other term that averages
# over the batch gets a derived FSDP2 case.
DDP_ONLY = {"agg", "istar", "simcse", "simctg", "tacl", "unlikelihood"}
CASES |= {name: case for name, case in derived_cases(CASES).items() if name.removesuffix("_derived") not in DDP_ONLY}


def test_the_terms_left_to_ddp_are_declared_terms() -> None:
    from degen_train.losses.declarations import declared_terms

    assert DDP_ONLY <= set(declared_terms())


def case_overrides(case: str, teacher: Path) -> tuple[list[str], tuple[str, ...]]:
    if case == "tacl":
        overrides = ["recipe=tacl", "model=tiny", "regularizer.tacl.teacher_dropout=false", f"teacher={teacher}"]
        return [*overrides, "data.tokenizer.vocab_size=1000"], ("train/tacl/loss", "train/mlm/loss")
    overrides, keys = CASES[case]
    return [*overrides, "data.tokenizer.vocab_size=1000"], keys


@pytest.mark.parametrize("case", [*CASES, "tacl"])
def test_fsdp2_two_processes_match_one_process_in_losses_and_weights(
    tmp_path: Path, case: str, fsdp_runs: Path, teacher: Path
) -> None:
    """2 processes × 4 sequences with FSDP2 = 1 process × 8, in losses and in weights after 6 updates."""
    common, keys = case_overrides(case, teacher)
    one_process_run(tmp_path / "single", *common, "data.batch_size=8")
    assert_same_run(fsdp_runs / case, tmp_path / "single", keys)
    log = (fsdp_runs / case / "train.log").read_text()
    if "cosreg" in case:  # shard-wise, not silently whole (devices.sharding.local_shard reads FSDP2's private records)
        assert "(FSDP2 shards), one all-reduce" in log
    if case == "tacl":  # the frozen teacher sharded too (regularizer.tacl.teacher_sharding=shard, the default)
        assert "FSDP2: tacl's frozen BertModel sharded (3 units and its root)" in log


RESUMABLE = ["model=tiny", "data.tokenizer.vocab_size=1000", "callbacks.checkpoint.every_n_train_steps=3",
             "scheduler.total_steps=6"]  # fmt: skip
ON_TWO = ["strategy=fsdp", "trainer.devices=2", "data.batch_size=4"]
ON_ONE = ["data.batch_size=8"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 steps on one process, straight: what every split run below must equal."""
    run_dir = tmp_path_factory.mktemp("straight")
    one_process_run(run_dir, *RESUMABLE, *ON_ONE)
    return run_dir


ONE_FILE = ["strategy.sharded_checkpoint=false"]


# Resumes moved between process counts: (first leg, second leg), each on 2 FSDP2 processes or on 1.
RESUMES = {"2-2": (ON_TWO, ON_TWO), "2-then-1": (ON_TWO, ON_ONE), "1-then-2-one-file": (ON_ONE, [*ON_TWO, *ONE_FILE])}
AGG = ["recipe=agg", "model=gpt2_tiny", "objective.agg.window_steps=2", "objective.agg.alpha=0.5",
       "data.tokenizer.vocab_size=1000", "callbacks.checkpoint.every_n_train_steps=3",
       "scheduler.total_steps=6"]  # fmt: skip


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory: pytest.TempPathFactory, teacher: Path) -> Path:
    """Every two-process run of this module on one FSDP2 job, in order: the cases; a 3-step sharded run; each
    resume's legs on 2 processes (a 1-process leg runs here, before the job, or in its test, after); AGG's."""
    root = tmp_path_factory.mktemp("fsdp")
    on_two = [(root / case, [*SAME_RUN_SETTINGS, *case_overrides(case, teacher)[0], *ON_TWO])
              for case in [*CASES, "tacl"]]  # fmt: skip
    on_two.append((root / "sharded", [*SAME_RUN_SETTINGS, *RESUMABLE, *ON_TWO, "trainer.max_steps=3"]))
    for name, (first, second) in RESUMES.items():
        if first == ON_ONE:  # before the job: its second leg resumes on 2 processes
            one_process_run(root / name, *RESUMABLE, *first, "trainer.max_steps=3")
        else:
            on_two.append((root / name, [*SAME_RUN_SETTINGS, *RESUMABLE, *first, "trainer.max_steps=3"]))
        if second != ON_ONE:  # a leg on 1 process runs in the test, after the job
            on_two.append((root / name, [*SAME_RUN_SETTINGS, *RESUMABLE, *second, "ckpt_path=last"]))
    on_two.append((root / "agg", [*SAME_RUN_SETTINGS, *AGG, *ON_TWO, "trainer.max_steps=3"]))
    on_two.append((root / "agg", [*SAME_RUN_SETTINGS, *AGG, *ON_TWO, "ckpt_path=last"]))
    on_two_processes(on_two)
    return root


@pytest.mark.parametrize("name", list(RESUMES))
def test_fsdp2_resume_is_exact_on_any_process_count(name: str, fsdp_runs: Path, straight: Path) -> None:
    """3 steps, a checkpoint, then a resumed run to 6 (on 2 FSDP2 processes, or moved between 2 and 1):
    the same losses and weights as 6 steps straight. FSDP2 writes sharded folders unless told one file;
    1 process without FSDP2 gathers a folder, FSDP2 reads a one-file checkpoint into its shards and, told
    so, writes one file (gathered on rank 0) that the comparison reads."""
    second = RESUMES[name][1]
    if second == ON_ONE:
        one_process_run(fsdp_runs / name, *RESUMABLE, *second, "ckpt_path=last")
    assert_same_run(fsdp_runs / name, straight, ("train/loss",))
    assert (fsdp_runs / name / "checkpoints" / "last.ckpt").is_dir() == (second == ON_TWO)


def test_fsdp2_with_bf16_mixed_precision_trains(tmp_path: Path) -> None:
    # allow_slow_precision: numerics, not speed, so the test also runs on a CPU that emulates bf16.
    bf16 = ["strategy.mixed_precision=bf16", "allow_slow_precision=true"]
    cli_run(tmp_path, "model=tiny", "data.tokenizer.vocab_size=1000", *ON_TWO, *bf16)
    losses = logged(tmp_path, "train/loss")
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses.values())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mixed_precision": "fp8"}, r"strategy.mixed_precision='fp8': Input should be 'bf16' or 'fp32'"),
        ({"cpu_offload": True}, r"strategy.cpu_offload=true keeps shards on the CPU between uses on a GPU"),
    ],
)
def test_fsdp2_options_that_cannot_work_here_are_named(options: dict, message: str) -> None:
    """A value out of the strategy's choices by its section (run/sections.py, before any framework loads); what
    only this machine says (no GPU to offload from) by the strategy itself."""
    from degen_train.core.section import checked_section
    from degen_train.run.parallel import FSDP2Strategy
    from degen_train.run.sections import StrategyConfig

    if options.get("cpu_offload") and torch.cuda.is_available():
        pytest.skip("CPU offload is valid on a GPU machine")
    with pytest.raises(ValueError, match=message):
        checked_section(StrategyConfig, {"_target_": "degen_train.run.parallel.FSDP2Strategy", **options}, "strategy")
        FSDP2Strategy(**options)


@pytest.fixture(scope="module")
def sharded_run(fsdp_runs: Path) -> Path:
    """3 steps on 2 FSDP2 processes: a sharded last.ckpt folder."""
    return fsdp_runs / "sharded"


def test_sharded_checkpoint_is_a_verified_folder_of_every_process_shards(sharded_run: Path) -> None:
    from degen_train.storage.checkpoints import verified_step

    last = sharded_run / "checkpoints" / "last.ckpt"
    assert last.is_dir() and {"__0_0.distcp", "__1_0.distcp", ".metadata", "meta.pt"} <= {
        p.name for p in last.iterdir()
    }
    assert verified_step(last) == 3
    assert not list(last.parent.glob(".*"))  # no staging or retired folder left behind


def test_a_sharded_checkpoint_missing_a_shard_is_refused_naming_it(sharded_run: Path, tmp_path: Path) -> None:
    import shutil

    from degen_train.storage.checkpoints import CheckpointError, verified_step

    partial = tmp_path / "checkpoints" / "last.ckpt"
    shutil.copytree(sharded_run / "checkpoints" / "last.ckpt", partial)
    (partial / "__1_0.distcp").unlink()
    assert verified_step(partial) is None
    with pytest.raises(CheckpointError, match=r"lacks shard files __1_0.distcp that its index names"):
        one_process_run(tmp_path / "resumed", *RESUMABLE, *ON_ONE, f"ckpt_path={partial}")
    assert not (tmp_path / "resumed" / "logs").exists()  # refused before training


def test_degen_convert_writes_one_file_and_an_hf_folder(sharded_run: Path, tmp_path: Path) -> None:
    """degen-convert, no process group: the one file holds the gathered weights; the HF folder loads with
    AutoModelForMaskedLM and AutoTokenizer and computes with those weights."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from degen_train.cli.convert import main

    main([str(sharded_run), "--ckpt", str(tmp_path / "one.ckpt"), "--hf", str(tmp_path / "hf")])
    gathered = checkpoint_weights(sharded_run / "checkpoints" / "last.ckpt")
    one = torch.load(tmp_path / "one.ckpt", weights_only=True)
    assert one["global_step"] == 3 and len(one["optimizer_states"][0]["state"]) > 0
    assert all(torch.equal(one["state_dict"][k], v) for k, v in gathered.items())
    model = AutoModelForMaskedLM.from_pretrained(tmp_path / "hf")
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, gathered[f"backbone.model.{name}"], rtol=0, atol=0)
    assert AutoTokenizer.from_pretrained(tmp_path / "hf").vocab_size == model.config.vocab_size
    with pytest.raises(SystemExit):  # never overwrites
        main([str(sharded_run), "--ckpt", str(tmp_path / "one.ckpt")])


def test_agg_window_resumes_exactly_from_a_sharded_checkpoint(tmp_path: Path, fsdp_runs: Path) -> None:
    """AGG's token-count window is extra state whose size changes every step (plain lists in the DCP shards):
    3 steps on 2 FSDP2 processes, a sharded checkpoint, 3 more = 6 steps on 1 process, the window sliding
    across the resume (K = 2) and the counts all-reduced over the processes."""
    one_process_run(tmp_path / "straight", *AGG, *ON_ONE)
    assert (fsdp_runs / "agg" / "checkpoints" / "last.ckpt").is_dir()
    assert_same_run(fsdp_runs / "agg", tmp_path / "straight", ("train/loss", "train/agg/rare_share"))
