"""How long each recipe takes on this machine: seconds per step at the recipe's own settings, the start-up, and the
whole run at the recipe's trainer.max_steps (README's table).

Each recipe runs three times into fresh folders: 2 steps (fills the tokenizer and example caches), then 4 and 16
steps; the step time is the difference of the last two over 12 steps, the start-up what is left of the 4-step run.
Validation is left out of the estimate (final_validation=false, one validation batch)."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import REPO, RESULTS, save
from degen_train.config import load_config
from degen_train.run.pretrain import train

# One-run recipes (the sweeps ablation_cosreg, compare_methods and search_cosreg are made of these). simctg is
# left out: its authors' setting (GPT-2 small, 32 × 256 tokens per micro-batch) was killed by the kernel at 22 GB
# resident on this 24 GiB machine; it needs a GPU's memory or data.batch_size=8 with accumulate_grad_batches=16
# (7.3 GB resident here).
RECIPES = [
    "bert_mlm", "bert_mlm_nsp", "electra", "coco_lm", "istar", "tacl", "simcse",
    "gpt2_mle", "gao_cosreg", "unlikelihood", "agg", "spectrum_control",
]  # fmt: skip
QUIET = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "final_validation=false",
    "trainer.limit_val_batches=1",
    "export_hf=false",
    "callbacks.checkpoint.every_n_train_steps=100000",
]


def timed_run(folder: Path, overrides: list[str], steps: int) -> tuple[float, dict]:
    cfg = load_config([*QUIET, *overrides, f"trainer.max_steps={steps}"], run_dir=folder)
    start = time.perf_counter()
    summary = train(cfg)
    return time.perf_counter() - start, summary


def interleaved_step_times(
    recipes: dict[str, list[str]], settings: dict[str, list[str]], *, rounds: int
) -> dict[tuple[str, str], float]:
    """{(recipe, setting): seconds per step}, every setting on every recipe, the settings taking turns: each runs 4
    and 16 steps into fresh folders, the step time is the difference over 12 steps (start-up and caches cancel), the
    median of ``rounds`` rounds. ``recipes``: name -> its overrides (recipe=NAME, model=...)."""
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for recipe, base in recipes.items():
            timed_run(root / recipe / "warm", base, 2)  # tokenizer and example caches
        for turn in range(rounds):
            for recipe, base in recipes.items():
                for name, extra in settings.items():
                    short, _ = timed_run(root / f"{recipe}-{name}-{turn}-short", [*base, *extra], 4)
                    long, _ = timed_run(root / f"{recipe}-{name}-{turn}-long", [*base, *extra], 16)
                    times.setdefault((recipe, name), []).append((long - short) / 12)
    return {key: statistics.median(values) for key, values in times.items()}


def ratio_rows(times: dict[tuple[str, str], float], *, kind: str, against: str, said: str) -> list[dict]:
    """One row per (recipe, setting) of ``interleaved_step_times``: seconds per step and the ratio to ``against``
    on the same recipe (column ``vs_AGAINST``), each printed as it is made ("×1.04 of SAID")."""
    rows = []
    for (recipe, name), per_step in times.items():
        ratio = per_step / times[(recipe, against)]
        rows.append({"recipe": recipe, kind: name, "seconds_per_step": round(per_step, 3),
                     f"vs_{against}": round(ratio, 2)})  # fmt: skip
        print(f"{recipe:<9} {name:<16} {per_step:6.3f} s/step  ×{ratio:.2f} of {said}")
    return rows


def main(names: list[str] | None = None) -> None:
    """Measure ``names`` (default: every recipe); rows already measured for other recipes are kept."""
    previous = RESULTS / "recipes.json"
    kept = json.loads(previous.read_text())["rows"] if names and previous.exists() else []
    rows = [row for row in kept if row["recipe"] not in names] if names else []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        # The teacher of TaCL and the start of SimCSE: a short bert_mlm run with its export.
        teacher = root / "teacher"
        train(load_config([*QUIET[:-2], "recipe=bert_mlm", "trainer.max_steps=2", "export_hf=true"], run_dir=teacher))
        for recipe in names or RECIPES:
            overrides = [f"recipe={recipe}", *([f"teacher={teacher}"] if recipe == "tacl" else [])]
            overrides += [f"start={teacher}"] if recipe == "simcse" else []
            planned = int(load_config(overrides).trainer.max_steps)
            timed_run(root / recipe / "warm", overrides, 2)  # caches
            short, _ = timed_run(root / recipe / "short", overrides, 4)
            long, _ = timed_run(root / recipe / "long", overrides, 16)
            per_step = (long - short) / 12
            startup = max(short - 4 * per_step, 0.0)
            row = {
                "recipe": recipe,
                "seconds_per_step": round(per_step, 3),
                "startup_seconds": round(startup, 1),
                "max_steps": planned,
                "estimated_minutes": round((startup + planned * per_step) / 60, 1),
            }
            rows.append(row)
            print(
                f"{recipe:<17} {per_step:6.3f} s/step, start-up {startup:5.1f} s, "
                f"{planned} steps ≈ {row['estimated_minutes']} min"
            )
    rows.sort(key=lambda row: RECIPES.index(row["recipe"]) if row["recipe"] in RECIPES else len(RECIPES))
    save("recipes", {"rows": rows, "method": __doc__.split("\n\n")[1].replace("\n", " ")})
    print(f"written to {REPO / 'bench' / 'results' / 'recipes.json'}")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main(sys.argv[1:] or None)
