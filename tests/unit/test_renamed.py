"""A config recorded before a module moved is read with the name each target has now (config/renamed.py): the
records of every run before issue 70 name the optimizer's and the schedule's builders at optim's top level, which now
holds only the map of its modules."""

from __future__ import annotations

import importlib

import pytest

from degen_train.config.renamed import RENAMED_TARGETS, current_target, current_targets


@pytest.mark.parametrize("old", sorted(RENAMED_TARGETS))
def test_a_target_recorded_before_it_moved_names_what_is_importable_now(old: str) -> None:
    module, _, name = current_target(old).rpartition(".")
    assert callable(getattr(importlib.import_module(module), name))
    assert not hasattr(importlib.import_module(old.rpartition(".")[0]), old.rpartition(".")[2])  # one name each


def test_a_recorded_config_is_rewritten_at_every_depth() -> None:
    recorded = {"optimizer": {"_target_": "degen_train.optim.build_optimizer", "lr": 0.1},
                "scheduler": {"_target_": "degen_train.optim.build_scheduler"},
                "callbacks": {"x": {"_target_": "degen_train.callbacks.isotropy.IsotropyMonitor"}}}  # fmt: skip
    assert current_targets(recorded) == {
        "optimizer": {"_target_": "degen_train.optim.optimizer.build_optimizer", "lr": 0.1},
        "scheduler": {"_target_": "degen_train.optim.schedule.build_scheduler"},
        "callbacks": {"x": {"_target_": "degen_train.callbacks.isotropy_monitor.IsotropyMonitor"}},
    }
