"""Every option of every config group, and every recipe, composes and builds (heavy models on 'meta')."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import hydra
import pytest
import torch
from hydra.errors import ConfigCompositionException

from degen_train.config import load_config
from degen_train.config.schema import validate_config
from degen_train.core.package_dir import config_dir
from degen_train.data.tokenizer import train_wordpiece
from degen_train.models.backbone import build_hf_model, model_family
from degen_train.run.build import build_strategy, build_trainer

CONF = config_dir()
GROUPS = [
    "model",
    "objective",
    "regularizer",
    "data",
    "optimizer",
    "scheduler",
    "trainer",
    "strategy",
    "logger",
    "callbacks",
    "debug",
]
OPTIONS = [(group, path.stem) for group in GROUPS for path in sorted((CONF / group).glob("*.yaml"))]
RECIPES = sorted(p.stem for p in (CONF / "recipe").glob("*.yaml"))
NEEDS = {
    ("data", "text"): ["data.path=README.md"],
    ("data", "hub"): ["data.name=wikitext"],
    ("regularizer", "tacl"): ["regularizer.tacl.teacher=runs/teacher"],
}


def companions(group: str, option: str) -> list[str]:
    if group == "model" and option.startswith(("gpt2", "llama", "qwen2")):
        return ["objective=mle"]
    if group == "objective" and option == "mle":
        return ["model=gpt2_tiny"]
    return NEEDS.get((group, option), [])


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_group_option_composes_and_builds(group: str, option: str, tmp_path: Path) -> None:
    cfg = load_config([f"{group}={option}", *companions(group, option)], run_dir=tmp_path)
    if group == "model":
        tokenizer = train_wordpiece(iter(["a small corpus of words"] * 3), cfg.data.tokenizer)
        with torch.device("meta"):  # shapes only: base and large without allocating their weights
            model = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
        assert model.config.hidden_size == cfg.model.hidden_size
        assert model_family(cfg.model) == cfg.model.family
    elif group == "strategy":
        if option == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
            with pytest.raises(ValueError, match="strategy=deepspeed needs the deepspeed package"):
                build_strategy(cfg.strategy)
        else:
            assert build_strategy(cfg.strategy) is not None
    elif group in ("optimizer", "scheduler"):
        blocks = torch.nn.ModuleList([torch.nn.Linear(2, 2)])  # a body of one block: something for Muon
        optimizer = hydra.utils.instantiate(cfg.optimizer)([torch.nn.Sequential(blocks, torch.nn.Linear(2, 1))])
        scheduler = hydra.utils.instantiate(cfg.scheduler)(optimizer)
        assert scheduler.get_last_lr()[0] > 0
    elif group in ("trainer", "logger", "callbacks"):
        if group == "trainer" and cfg.trainer.accelerator == "gpu" and not torch.cuda.is_available():
            pytest.skip("trainer=gpu needs a CUDA device")
        build_trainer(validate_config(cfg))


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_composes_with_a_model_override(recipe: str, tmp_path: Path) -> None:
    extra = {"tacl": ["teacher=runs/teacher"], "simcse": ["start=runs/teacher"]}.get(recipe, [])
    cfg = load_config([f"recipe={recipe}", *extra], run_dir=tmp_path)
    small = "gpt2_tiny" if cfg.model.family == "decoder" else "tiny"
    resized = load_config([f"recipe={recipe}", f"model={small}", *extra], run_dir=tmp_path)
    assert resized.model.hidden_size == 128
    assert resized.trainer.max_steps == cfg.trainer.max_steps  # the recipe's other settings stay


def test_recipes_resolve_from_another_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config(["recipe=bert_mlm_nsp"]).objective.keys() == {"mlm", "nsp"}


def test_unknown_group_option_lists_the_choices() -> None:
    with pytest.raises(ConfigCompositionException, match=r"(?s)Could not find 'model/huge'.*Available options.*mini"):
        load_config(["model=huge"])


def test_any_trainer_argument_is_reachable(tmp_path: Path) -> None:
    cfg = load_config(
        ["trainer.max_steps=7", "+trainer.fast_dev_run=false", "trainer.precision=bf16-mixed"], run_dir=tmp_path
    )
    trainer = build_trainer(validate_config(cfg))
    assert trainer.max_steps == 7 and "bf16" in str(trainer.precision)
    assert cfg.scheduler.total_steps == 7


def test_objective_that_does_not_fit_the_model_family(tmp_path: Path) -> None:
    from tests.helpers import run

    with pytest.raises(ValueError, match=r"loss term 'mlm' needs the encoder family but model=gpt2_tiny is decoder"):
        run(tmp_path, "model=gpt2_tiny")


def test_slurm_cluster_config_builds_a_job_spec(tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=["cluster=slurm", "hydra.launcher.nodes=2", "hydra.launcher.partition=gpu"],
            return_hydra_config=True,
        )
    HydraConfig.instance().set_config(cfg)
    assert (cfg.trainer.num_nodes, cfg.trainer.devices, cfg.trainer.accelerator) == (2, 8, "gpu")
    assert cfg.strategy._target_.endswith("DDPStrategy")
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert launcher["_target_"].endswith("SlurmLauncher")
    # The parameters the plugin hands to submitit give this sbatch script (SlurmExecutor itself refuses to
    # start without srun, so its script builder is called directly).
    from submitit.slurm.slurm import _make_sbatch_string

    script = _make_sbatch_string(
        command="degen-train",
        folder=tmp_path,
        nodes=launcher["nodes"],
        ntasks_per_node=launcher["tasks_per_node"],
        gpus_per_node=launcher["gpus_per_node"],
        cpus_per_task=launcher["cpus_per_task"],
        time=launcher["timeout_min"],
        partition=launcher["partition"],
    )
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=1440",
    ):
        assert line in script


def test_search_recipe_configures_the_optuna_sweeper() -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["recipe=search_cosreg"], return_hydra_config=True)
    assert cfg.hydra.sweeper._target_.endswith("OptunaSweeper")
    assert "regularizer.cosreg.weight" in cfg.hydra.sweeper.params
    from degen_train.run.sweep import search_objective

    summary = {"val_loss": 5.0, "isotropy": {"isotropy/embedding/mean_cosine": 0.1}}
    assert search_objective(summary, cfg.search) == pytest.approx(5.0 + 2.0 * 0.1)
    summary["isotropy"]["isotropy/embedding/mean_cosine"] = 0.5
    assert search_objective(summary, cfg.search) == float("inf")
