"""PNG figures of degeneration (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402


def _save(figure: plt.Figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def cone_plot(weights: Tensor, counts: Tensor, path: Path, title: str = "") -> Path:
    """Embedding rows on their top-2 singular directions, coloured by log token frequency (Gao et al. fig. 1)."""
    matrix = weights.detach().double()
    _, _, vh = torch.linalg.svd(matrix, full_matrices=False)  # uncentred, as in Gao et al.
    projected = (matrix @ vh[:2].T).numpy()
    colour = np.log1p(counts.double().numpy())
    figure, axis = plt.subplots(figsize=(5.5, 5))
    order = np.argsort(colour)
    points = axis.scatter(projected[order, 0], projected[order, 1], c=colour[order], s=3, cmap="viridis")
    figure.colorbar(points, ax=axis, label="log(1 + token count)")
    axis.axhline(0, color="grey", lw=0.5)
    axis.axvline(0, color="grey", lw=0.5)
    axis.set_xlabel("singular direction 1")
    axis.set_ylabel("singular direction 2")
    axis.set_title(title or "embedding rows (cone plot)")
    return _save(figure, path)


def spectrum_plot(spectra: dict[str, Tensor], path: Path) -> Path:
    """Normalised singular values, one line per matrix (e.g. raw and centred)."""
    figure, axis = plt.subplots(figsize=(5.5, 4))
    for (name, singular_values), style in zip(spectra.items(), ("-", "--", ":", "-."), strict=False):
        values = singular_values.double().numpy()
        axis.semilogy(np.arange(1, len(values) + 1), values / values[0], style, label=name)
    axis.set_xlabel("index")
    axis.set_ylabel("singular value / largest")
    axis.legend()
    axis.set_title("embedding singular value spectrum")
    return _save(figure, path)


def layer_cosine_plot(per_layer: dict[str, list[float]], path: Path) -> Path:
    figure, axis = plt.subplots(figsize=(5.5, 4))
    # Distinct markers and dashes: with no outlier dimension "clipped" lies exactly on "raw".
    for (mode, values), style in zip(per_layer.items(), ("o-", "s--", "^:", "D-."), strict=False):
        axis.plot(range(len(values)), values, style, label=mode, markersize=7 if mode == "raw" else 4)
    axis.set_xticks(range(max((len(v) for v in per_layer.values()), default=0)))
    axis.set_xlabel("layer (0 = embeddings)")
    axis.set_ylabel("mean cosine between token vectors")
    axis.axhline(0, color="grey", lw=0.5)
    axis.legend()
    axis.set_title("anisotropy per layer")
    return _save(figure, path)


def cosine_histogram(
    samples: dict[str, Tensor], path: Path, *, xlabel: str = "cosine between random pairs", title: str = ""
) -> Path:
    figure, axis = plt.subplots(figsize=(5.5, 4))
    for name, values in samples.items():
        axis.hist(values.double().numpy(), bins=60, range=(-1, 1), alpha=0.55, density=True, label=name)
    axis.set_xlabel(xlabel)
    axis.set_ylabel("density")
    axis.legend()
    axis.set_title(title or "cosine of random pairs")
    return _save(figure, path)


def dimension_means_plot(means: list[float], outliers: list[int], path: Path) -> Path:
    figure, axis = plt.subplots(figsize=(6.5, 3.5))
    values = np.array(means)
    axis.bar(np.arange(len(values)), values, width=1.0, color="steelblue")
    if outliers:
        axis.bar(outliers, values[outliers], width=1.5, color="crimson", label="outlier dims (Luo et al. 2021)")
        axis.legend()
    axis.set_xlabel("dimension")
    axis.set_ylabel("mean value (last layer)")
    axis.set_title("mean value per dimension")
    return _save(figure, path)
