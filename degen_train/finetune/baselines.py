"""What a fine-tuned score is worth: the same task's score of a model that learned nothing, beside it.

Two baselines per task, each scored by the task's own metrics on its dev splits: the majority class (the training
split's most frequent label predicted for every dev row; for a regression task the training mean, whose
correlation is 0) and chance (labels drawn uniformly at random: the mean score over CHANCE_DRAWS seeded draws). A
cell whose dev predictions are all one class is flagged: its score is that class's share, not what the model learned
(RTE's 47.3 in the issue was every row predicted ``not_entailment``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from degen_train.finetune.metrics import split_metrics, task_score
from degen_train.finetune.tasks import Task

CHANCE_DRAWS = 200


def task_baselines(task: Task) -> dict[str, Any]:
    """{"majority": score, "chance": score, "majority_label": the label predicted} on ``task``'s dev splits."""
    metrics = task.layout.metrics
    if task.num_labels == 1:  # regression: a constant prediction correlates with nothing
        constant = float(np.mean(task.train.labels))
        majority = task_score({n: split_metrics(metrics, [constant] * len(s), s.labels) for n, s in task.dev.items()})
        return {"majority": majority, "chance": 0.0, "majority_label": f"the training mean {constant:.2f}"}
    label = Counter(task.train.labels).most_common(1)[0][0]
    majority = task_score({n: split_metrics(metrics, [label] * len(s), s.labels) for n, s in task.dev.items()})
    rng = np.random.default_rng(0)
    draws = [task_score({n: split_metrics(metrics, rng.integers(task.num_labels, size=len(s)).tolist(), s.labels)
                         for n, s in task.dev.items()}) for _ in range(CHANCE_DRAWS)]  # fmt: skip
    names = task.layout.labels or ()
    return {"majority": majority, "chance": float(np.mean(draws)),
            "majority_label": names[label] if label < len(names) else str(label)}  # fmt: skip


def predicted_classes(predictions: Sequence, *, regression: bool) -> int:
    """How many distinct classes a classifier predicted on a split (a regression head: how many distinct values)."""
    return len(set(np.round(np.asarray(predictions, dtype=float), 6).tolist())) if regression else len(set(predictions))


def one_class_note(cells: Sequence[dict[str, Any]]) -> str | None:
    """'k of n cells predicted one class', or None: said beside a task's score in glue.md and the report."""
    flagged = [c for c in cells if c.get("one_class")]
    if not flagged:
        return None
    return f"{len(flagged)} of {len(cells)} cell(s) predicted one class for every dev row"
