"""One smoke test for the console scripts as a shell starts them: each installed command runs in a fresh process
(its entry point, its imports, its arguments), the other tests call their main() in-process (tests.helpers.command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import COMMANDS


def test_every_console_script_starts_and_answers_help() -> None:
    """pyproject.toml's [project.scripts] installed: each command's --help exits 0 and names the command."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's TOML reader")
    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert {name: target.split(":")[0] for name, target in scripts.items()} == COMMANDS
    for name in COMMANDS:
        result = subprocess.run([str(Path(sys.executable).parent / name), "--help"], capture_output=True, text=True,
                                timeout=300)  # fmt: skip
        assert result.returncode == 0, (name, result.stderr[-2000:])
        assert name in result.stdout, (name, result.stdout[:500])


FRAMEWORKS = ("torch", "lightning", "transformers", "datasets")
# One fresh interpreter runs degen-train's main() on ARGV and prints which frameworks it had imported when it ended.
PROBE = """
import sys
sys.argv = ["degen-train", *sys.argv[1:]]
from degen_train.cli.train import main
try:
    main()
except SystemExit as stopped:
    print(stopped.code, file=sys.stderr)
print("LOADED", sorted(m for m in {frameworks!r} if m in sys.modules))
"""


OTHER_PROBE = """
import importlib, sys
module, sys.argv = sys.argv[1], sys.argv[1:]
try:
    importlib.import_module(module).main(sys.argv[1:])
except SystemExit as stopped:
    print(stopped.code, file=sys.stderr)
print("LOADED", sorted(m for m in {frameworks!r} if m in sys.modules))
"""


@pytest.mark.parametrize(("module", "argv", "said"), [
    ("degen_train.cli.evaluate", ["run", "--out", "o", "--stride", "0"], "argument --stride: 0 is not from 1 to"),
    ("degen_train.cli.evaluate", ["run", "--out", "o", "--limit", "-1"], "argument --limit: -1 is not from 1 to"),
    ("degen_train.cli.evaluate", ["run", "--out", "o", "--layer", "top"], "'top' is not last, first_last or a layer"),
    ("degen_train.cli.analyze", ["run", "--max-sentences", "0"], "argument --max-sentences: 0 is not from 1 to"),
    ("degen_train.cli.analyze", ["run", "--skip", "cone"], "argument --skip: cannot skip cone: the parts that can be"),
    ("degen_train.cli.report", ["no_such_folder"], "degen-report: error: no_such_folder does not exist"),  # was 5 s
    ("degen_train.cli.report", ["run", "--analysis-skip", "cone"], "--analysis-skip cone: not a part of an analysis"),
    ("degen_train.cli.convert", ["src", "--bogus"], "unrecognized arguments: --bogus"),
    ("degen_train.cli.convert", ["src"], "nothing to write: give --ckpt OUT.ckpt and/or --hf OUT_DIR"),
    ("degen_train.cli.evaluate", ["run", "--out", "o"], "nothing to evaluate: give --sts FILE, --wic DIR"),
    ("degen_train.cli.evaluate", ["--help"], "SimCTG's protocol by default"),
    ("degen_train.cli.evaluate", ["run", "--out", "o", "--generate", "f", "--top-p", "1.5"],
     "--top-p 1.5: Input should be less than or equal to 1"),  # was after the model loaded
    ("degen_train.cli.finetune", ["model", "--out", "o", "--seeds", "1000000"], "--seeds: 1,000,000 is not from 1"),
    ("degen_train.cli.reproduce", ["seeds=1000000000"], "seeds=1000000000: a whole number from 1 to 100"),
])  # fmt: skip
def test_the_other_commands_refuse_their_arguments_before_any_framework_loads(module: str, argv: list[str],
                                                                              said: str) -> None:  # fmt: skip
    """Issues 73.1 and 72.8: degen-eval, degen-analyze and degen-convert read their command line (its bounds, named)
    before torch and the frameworks load (each took 8 s here to say `unrecognized arguments`)."""
    import os

    probe = OTHER_PROBE.format(frameworks=FRAMEWORKS)
    result = subprocess.run([sys.executable, "-c", probe, module, *argv], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert "LOADED []" in result.stdout, (result.stdout[-1500:], result.stderr[-1500:])
    assert said in result.stdout + result.stderr


@pytest.mark.parametrize(("argv", "said"), [
    (["+model.hiden_size=64"], "model.hiden_size: not a setting of model (did you mean model.hidden_size?)"),
    (["regularizer=cosreg", "regularizer.cosreg.rows=rare"], "regularizer.cosreg.rows='rare' is not one of all, seen"),
    (["regularizer=dispersion", "regularizer.dispersion.temprature=2"],
     "regularizer.dispersion.temprature is not an option of loss term dispersion; did you mean temperature"),
    (["trainer.max_stesp=3"], "trainer.max_stesp is not a lightning.pytorch.Trainer argument; did you mean: max_steps"),
    (["+trainer.foo=1"], "trainer.foo is not a lightning.pytorch.Trainer argument"),  # was the Trainer's TypeError
    # the model's, the data's and the trainer's own sections (7-8 s each before, after the frameworks)
    (["model.arch=lama"], "model.arch='lama': not one of bert, roberta, modernbert, gpt2, llama, qwen2"),
    (["model=llama_tiny", "model.dropout=0.1"], "llama has no hidden-state dropout"),
    (["data=text"], "data: source=text reads files: give a file or directory, e.g. data.path=corpus.txt"),
    (["objective=mle", "model=tiny"], "loss term 'mle' needs the decoder family but model=tiny is encoder"),  # 6.9 s
    (["objective=mlm_nsp", "model=roberta_tiny"], "needs a next-sentence head, which model.arch=roberta does not have"),
    (["model=llama_tiny", "objective=mle", "model.position_embeddings=none"],
     "model.position_embeddings=none: llama has no learned absolute position table"),  # both 7.2 s before
    (["trainer.precision=bf17"], "trainer.precision='bf17': not one of Lightning's precisions (transformer-engine, "),
    (["eval.finetune.padding=longest"], "eval.finetune: padding='longest': Input should be 'dynamic' or 'max_length'"),
    (["logger=wandb", "logger.wandb.mode=onlin"], "logger.wandb.mode='onlin': Input should be 'auto', 'online'"),
    (["strategy=fsdp", "strategy.mixed_precision=bf17"], "strategy.mixed_precision='bf17': Input should be 'bf16'"),
    (["model.attention=flash"], "model.attention='flash': not one of transformers' attention implementations"),
    (["+sed=3"], "sed: not a setting of the config (did you mean seed?)"),  # was accepted, the run trained on
    (["+optimizer.weight_decy=0.1"], "optimizer: weight_decy is not an argument of degen_train.optim.optimizer."
                                     "build_optimizer (did you mean weight_decay?)"),  # was a TypeError 7 s in
    (["trainer.devices=0"], "trainer.devices=0: give a count of devices (1 or more), -1 for every device"),
    (["--list"], "recipes (recipe=NAME):"),
    (["--help"], "degen-train"),
])  # fmt: skip
def test_the_config_alone_is_answered_before_any_framework_loads(argv: list[str], said: str) -> None:
    """Issues 70.6 and 73.1: the composition, the typed checks, the roles, --help, --list and every refusal of the
    config alone import neither torch, Lightning, transformers nor datasets (16 s of a start-up here)."""
    import os

    probe = PROBE.format(frameworks=FRAMEWORKS)
    result = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert "LOADED []" in result.stdout, (result.stdout[-1500:], result.stderr[-1500:])
    assert said in result.stdout + result.stderr
    if argv == ["--list"]:
        assert "dispersion" in result.stdout + result.stderr


SECTIONS = ("degen_train.data.section", "degen_train.models.section", "degen_train.optim.section",
            "degen_train.callbacks.sections", "degen_train.finetune.section", "degen_train.losses.section",
            "degen_train.evaluation.section", "degen_train.run.sections", "degen_train.config.schema",
            "degen_train.config.role_lookup", "degen_train.config.handed_over")  # fmt: skip


def test_each_components_typed_section_imports_no_framework() -> None:
    """Issue 70.1 and 70.6: a component's section lives beside its code, and importing it (its package's __init__
    included) or validating it (a WSD schedule's decay, checked by the section's own rule) loads no framework."""
    probe = f"""
import importlib, sys
for name in {SECTIONS!r}:
    importlib.import_module(name)
from degen_train.optim.section import SchedulerConfig
SchedulerConfig.model_validate({{"schedule": "wsd", "warmup_steps": 10, "total_steps": 100, "min_ratio": 0.0}})
print("LOADED", sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert "LOADED []" in result.stdout, (result.stdout[-1500:], result.stderr[-1500:])
