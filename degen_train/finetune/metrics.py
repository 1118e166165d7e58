"""GLUE's metrics, each × 100, computed with the libraries GLUE's own evaluation uses (scikit-learn, scipy).

Per task one score: the metric, or the mean of a task's two metrics (MRPC, QQP: F1 and accuracy; STS-B: Pearson and
Spearman), and MNLI's matched and mismatched accuracies averaged — the GLUE paper's rule ("for tasks with multiple
metrics, an unweighted average"). The GLUE average is the mean of those per-task scores over the tasks run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Accuracy = mean(pred == label) × 100 (RTE, SST-2, QNLI, WNLI, MNLI; Wang et al. 2019, GLUE)."""
    return float(np.mean(np.asarray(predictions) == np.asarray(labels)) * 100)


def f1(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """F1 = 2·P·R / (P + R) of the positive class (label 1) × 100 (MRPC, QQP; GLUE)."""
    return float(f1_score(labels, predictions, pos_label=1, zero_division=0) * 100)


def matthews(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Matthews correlation (TP·TN − FP·FN) / √((TP+FP)(TP+FN)(TN+FP)(TN+FN)) × 100 (CoLA; Warstadt et al. 2019)."""
    return float(matthews_corrcoef(labels, predictions) * 100)


def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Pearson r of predicted and gold scores × 100 (STS-B; GLUE); 0 when the predictions are constant."""
    if np.ptp(np.asarray(predictions, dtype=float)) == 0:
        return 0.0
    return float(pearsonr(predictions, labels)[0] * 100)


def spearman(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Spearman ρ of predicted and gold scores × 100 (STS-B; GLUE); 0 when the predictions are constant."""
    if np.ptp(np.asarray(predictions, dtype=float)) == 0:
        return 0.0
    return float(spearmanr(predictions, labels)[0] * 100)


METRICS = {"accuracy": accuracy, "f1": f1, "matthews": matthews, "pearson": pearson, "spearman": spearman}


def split_metrics(names: Sequence[str], predictions: Sequence, labels: Sequence) -> dict[str, float]:
    return {name: METRICS[name](predictions, labels) for name in names}


def task_score(dev_metrics: dict[str, dict[str, float]]) -> float:
    """One number per task: the mean over its dev splits of the mean of each split's metrics."""
    per_split = [float(np.mean(list(metrics.values()))) for metrics in dev_metrics.values()]
    return float(np.mean(per_split))


def glue_average(scores: dict[str, float]) -> float:
    """The unweighted mean of the per-task scores given (``average_of`` chooses them and says what they are)."""
    return float(np.mean(list(scores.values())))


# The GLUE average of the BERT/RoBERTa-era dev tables: the eight tasks without WNLI, whose dev set is adversarial (its
# sentences reappear in train with the other label: majority-class 56.3 beats most fine-tuned models).
GLUE_AVERAGED = ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte")


def average_of(scores: dict[str, float]) -> dict[str, object]:
    """The average a table may show, and what it is: the GLUE average (all eight tasks), a partial one (some of
    them: labelled so), WNLI never in it; tasks of your own are averaged among themselves, said so."""
    glue = {k: v for k, v in scores.items() if k in GLUE_AVERAGED}
    others = {k: v for k, v in scores.items() if k not in GLUE_TASK_NAMES}
    left_out = sorted(k for k in scores if k == "wnli")
    if glue:
        complete = len(glue) == len(GLUE_AVERAGED)
        label = ("GLUE average (8 tasks, WNLI left out)" if complete else
                 f"partial GLUE average ({len(glue)} of 8 tasks: {', '.join(sorted(glue))})")  # fmt: skip
        return {"average": glue_average(glue), "label": label, "tasks": sorted(glue), "left_out": left_out,
                "complete": complete}  # fmt: skip
    if others:
        return {"average": glue_average(others), "label": f"average of {', '.join(sorted(others))} (not GLUE)",
                "tasks": sorted(others), "left_out": left_out, "complete": False}  # fmt: skip
    return {"average": None, "label": "no average (WNLI alone)", "tasks": [], "left_out": left_out, "complete": False}


GLUE_TASK_NAMES = (*GLUE_AVERAGED, "wnli")
