"""PNG figures of degeneration (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from degen_train.core.io import staged_file  # noqa: E402


def _title(axis: plt.Axes, text: str) -> None:
    """A title that wraps instead of running off the figure (a run's setting can be long)."""
    axis.set_title(textwrap.fill(text, 70), fontsize=9)


def save_figure(figure: plt.Figure, path: Path) -> Path:
    """Laid out, written at the house's resolution through a staging file (a full disk or a file-size limit leaves
    no torn picture: the earlier one, if any, stays whole), and closed (pyplot keeps every open figure)."""
    figure.tight_layout()
    try:
        with staged_file(Path(path), "wb") as stream:
            figure.savefig(stream, dpi=110, format=Path(path).suffix.lstrip(".") or "png")
    finally:
        plt.close(figure)
    return path


def cone_coordinates(weights: Tensor) -> np.ndarray:
    """Rows projected on the top-2 right singular vectors (uncentred, as in Gao et al.), each direction's sign chosen
    so the rows' mean projection is >= 0 and divided by the longest row's norm: an SVD's signs are arbitrary and
    norms differ between runs, so without this two runs' plots flip and rescale and cannot be compared."""
    matrix = weights.detach().double()
    _, _, vh = torch.linalg.svd(matrix, full_matrices=False)
    projected = matrix @ vh[:2].T
    signs = torch.where(projected.mean(dim=0) < 0, -1.0, 1.0).to(projected.dtype)
    longest = matrix.norm(dim=1).max().clamp_min(torch.finfo(matrix.dtype).tiny)
    return (projected * signs / longest).numpy()


def cone_plot(weights: Tensor, counts: Tensor, path: Path, title: str = "") -> Path:
    """Embedding rows on their top-2 singular directions, coloured by log token frequency (Gao et al. fig. 1), on
    fixed axes [-1, 1] (coordinates over the longest row's norm) so that runs compare side by side."""
    projected = cone_coordinates(weights)
    colour = np.log1p(counts.double().numpy())
    figure, axis = plt.subplots(figsize=(5.5, 5))
    order = np.argsort(colour)
    points = axis.scatter(projected[order, 0], projected[order, 1], c=colour[order], s=3, cmap="viridis")
    figure.colorbar(points, ax=axis, label="log(1 + token count)")
    axis.axhline(0, color="grey", lw=0.5)
    axis.axvline(0, color="grey", lw=0.5)
    axis.set_xlim(-1.05, 1.05)
    axis.set_ylim(-1.05, 1.05)
    axis.set_aspect("equal")
    axis.set_xlabel("singular direction 1 (/ longest row norm)")
    axis.set_ylabel("singular direction 2 (/ longest row norm)")
    _title(axis, title or "embedding rows (cone plot)")
    return save_figure(figure, path)


def spectrum_plot(spectra: dict[str, Tensor], path: Path, title: str = "") -> Path:
    """Normalised singular values, one line per matrix (e.g. raw and centred)."""
    figure, axis = plt.subplots(figsize=(5.5, 4))
    for (name, singular_values), style in zip(spectra.items(), ("-", "--", ":", "-."), strict=False):
        values = singular_values.double().numpy()
        axis.semilogy(np.arange(1, len(values) + 1), values / values[0], style, label=name)
    axis.set_xlabel("index")
    axis.set_ylabel("singular value / largest")
    axis.legend()
    _title(axis, title or "embedding singular value spectrum")
    return save_figure(figure, path)


def layer_cosine_plot(per_layer: dict[str, list[float]], path: Path, title: str = "") -> Path:
    figure, axis = plt.subplots(figsize=(5.5, 4))
    # With no outlier dimension "clipped" lies exactly on "raw": its label says so, and raw is drawn last as large
    # hollow markers, so the two stay visible where they coincide.
    raw = per_layer.get("raw")
    ordered = [(m, v) for m, v in per_layer.items() if m != "raw"] + ([("raw", raw)] if raw is not None else [])
    for mode, values in ordered:
        style = {"raw": "o-", "whitened": "s--", "clipped": "^:"}.get(mode, "D-.")
        same = mode != "raw" and raw is not None and np.allclose(values, raw, rtol=1e-6, atol=1e-9)
        label = f"{mode} (= raw)" if same else mode
        hollow = {"markerfacecolor": "none", "markersize": 10, "zorder": 3} if mode == "raw" else {"markersize": 4}
        axis.plot(range(len(values)), values, style, label=label, **hollow)
    axis.set_xticks(range(max((len(v) for v in per_layer.values()), default=0)))
    axis.set_xlabel("layer (0 = embeddings)")
    axis.set_ylabel("mean cosine between token vectors")
    axis.axhline(0, color="grey", lw=0.5)
    axis.legend()
    _title(axis, title or "anisotropy per layer")
    return save_figure(figure, path)


def outliers_per_layer_plot(layers: list[dict], path: Path, title: str = "") -> Path:
    """Kurtosis and ∞-norm of each block's output (log scale: a Gaussian's kurtosis is 3, BERT-base's
    outlier layers reach thousands), with the layers holding massive activations marked."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    x = range(len(layers))
    for axis, key, label in ((left, "kurtosis", "kurtosis (3 = Gaussian)"), (right, "inf_norm", "max |x| (∞-norm)")):
        values = [layer[key] for layer in layers]
        axis.plot(x, values, "o-", markersize=4)
        massive = [i for i, layer in enumerate(layers) if layer.get("massive_activations")]
        if massive:
            axis.plot(massive, [values[i] for i in massive], "r*", markersize=11, label="massive activations")
            axis.legend()
        axis.set_yscale("log")
        axis.set_xticks(list(x))
        axis.set_xlabel("transformer block (its output, before any final norm)")
        axis.set_ylabel(label)
    left.axhline(3, color="grey", lw=0.5)
    figure.suptitle(textwrap.fill(title or "outliers per layer", 90), fontsize=9)
    return save_figure(figure, path)


def cosine_histogram(
    samples: dict[str, Tensor], path: Path, *, xlabel: str = "cosine between random pairs", title: str = ""
) -> Path:
    """Histograms over the data's own range (a degenerate model's cosines all sit near 1: on [-1, 1] they would be one
    bar), the range written on the axis."""
    figure, axis = plt.subplots(figsize=(5.5, 4))
    arrays = {name: values.double().numpy() for name, values in samples.items() if values.numel()}
    low = min((a.min() for a in arrays.values()), default=-1.0)
    high = max((a.max() for a in arrays.values()), default=1.0)
    pad = max((high - low) * 0.02, 1e-6)
    for name, values in arrays.items():
        axis.hist(values, bins=60, range=(low - pad, high + pad), alpha=0.55, density=True, label=name)
    axis.set_xlabel(f"{xlabel} (data range {low:.3f} to {high:.3f})")
    axis.set_ylabel("density")
    axis.legend(loc="upper left")  # a fixed corner: "best" searches every bar of every histogram
    _title(axis, title or "cosine of random pairs")
    return save_figure(figure, path)


def dimension_means_plot(means: list[float], outliers: list[int], path: Path, title: str = "") -> Path:
    figure, axis = plt.subplots(figsize=(6.5, 3.5))
    values = np.array(means)
    axis.bar(np.arange(len(values)), values, width=1.0, color="steelblue")
    if outliers:
        axis.bar(outliers, values[outliers], width=1.5, color="crimson", label="outlier dims (Luo et al. 2021)")
        # A fixed corner: matplotlib's "best" searches every one of the d bars (over a second, and a warning).
        axis.legend(loc="upper right")
    axis.set_xlabel("dimension")
    axis.set_ylabel("mean value (last layer)")
    _title(axis, title or "mean value per dimension")
    return save_figure(figure, path)
