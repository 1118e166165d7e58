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
    """The GLUE average: the unweighted mean of the per-task scores of the tasks run."""
    return float(np.mean(list(scores.values())))
