"""The settings that cannot change what a run measures: a rerun or a report may ignore a difference in them."""

from __future__ import annotations

# Keys (or prefixes ending in ".") that cannot change what a finished run measured: a rerun that differs only
# in these reuses the run. Any other difference is refused, naming it (a sweep rerun with a changed setting).
NO_EFFECT_ON_RESULT = (
    "run_dir",
    "trainer.default_root_dir",  # where the run lives: a copied or moved run folder is the same run
    "ckpt_path",
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "trainer.log_every_n_steps",
    "logger.",
    "data.num_workers",
    "data.cache_dir",
    "callbacks.checkpoint.",
    "callbacks.preemption.",
    "push_to_hub.",
    "allow_slow_precision",
    "threads",
    "search.",
)


def has_no_effect_on_result(key: str) -> bool:
    """Whether changing ``key`` leaves the run's result as it was (NO_EFFECT_ON_RESULT)."""
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in NO_EFFECT_ON_RESULT)
