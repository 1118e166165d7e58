"""Figures that compare between runs (issue 24.6): cone plots on fixed axes and signs, histograms over the data's
range, a clipped curve that does not hide the raw one, titles naming the setting and step."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from degen_train.evaluation.model_analysis import model_name
from degen_train.metrics import plots


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[plt.Figure]:
    """The figures the plot functions draw, kept open instead of saved."""
    figures: list[plt.Figure] = []
    monkeypatch.setattr(plots, "save_figure", lambda figure, path: figures.append(figure) or path)
    return figures


def test_cone_coordinates_have_fixed_signs_and_scale() -> None:
    weights = torch.randn(200, 16, generator=torch.Generator().manual_seed(0)) + 2.0  # a cone: all rows one way
    coordinates = plots.cone_coordinates(weights)
    assert (coordinates.mean(axis=0) >= 0).all() and np.abs(coordinates).max() <= 1 + 1e-12
    np.testing.assert_allclose(plots.cone_coordinates(weights * 7.5), coordinates, atol=1e-6)  # norm-free
    # Negating the matrix negates every projection (as an SVD's arbitrary signs would): the sign rule undoes it.
    np.testing.assert_allclose(plots.cone_coordinates(-weights), coordinates, atol=1e-6)


def test_the_cone_plot_has_fixed_axes(drawn: list[plt.Figure], tmp_path: Path) -> None:
    plots.cone_plot(torch.randn(50, 8), torch.ones(50), tmp_path / "c.png", title="regularizer.cosreg.weight=1, step 9")
    axis = drawn[0].axes[0]
    assert axis.get_xlim() == (-1.05, 1.05) and axis.get_ylim() == (-1.05, 1.05)
    assert axis.get_title() == "regularizer.cosreg.weight=1, step 9"


def test_a_degenerate_histogram_is_drawn_over_the_datas_range(drawn: list[plt.Figure], tmp_path: Path) -> None:
    narrow = torch.linspace(0.95, 0.99, 500)  # every pair nearly parallel: on [-1, 1] this is one bar
    plots.cosine_histogram({"random": narrow}, tmp_path / "h.png")
    axis = drawn[0].axes[0]
    low, high = axis.get_xlim()
    assert 0.9 < low < 0.95 and 0.99 < high < 1.0
    assert "data range 0.950 to 0.990" in axis.get_xlabel()


def test_a_clipped_curve_equal_to_raw_says_so_and_raw_stays_visible(drawn: list[plt.Figure], tmp_path: Path) -> None:
    curves = {"raw": [0.5, 0.4], "whitened": [0.1, 0.0], "clipped": [0.5, 0.4]}
    plots.layer_cosine_plot(curves, tmp_path / "l.png")
    lines = drawn[0].axes[0].get_lines()
    labels = [line.get_label() for line in lines if not line.get_label().startswith("_")]
    assert labels == ["whitened", "clipped (= raw)", "raw"]  # raw last: on top
    raw = next(line for line in lines if line.get_label() == "raw")
    assert raw.get_markerfacecolor() == "none" and raw.get_markersize() > 4


def test_a_figure_title_names_the_setting_and_step_not_the_folder(tmp_path: Path) -> None:
    run = tmp_path / "2026-11-24" / "06-22-17"
    run.mkdir(parents=True)
    config = {"objective": {"mle": {}}, "regularizer": {"cosreg": {}}}
    (run / "summary.json").write_text(json.dumps({"final_step": 300, "config": config}))
    assert model_name(run) == "mle + cosreg, step 300"
    (run / "overrides.json").write_text(json.dumps(["regularizer.cosreg.weight=1", "seed=2"]))
    assert model_name(run) == "regularizer.cosreg.weight=1, seed=2, step 300"


def test_the_report_curves_put_each_value_at_the_updates_done(tmp_path: Path) -> None:
    """Issue 38.5: the validation after update 100 (Lightning stamps it step 99) was drawn at x = 99. Rows are
    stamped with the 0-based update they follow; the final validation with the update count itself."""
    import pandas as pd

    from degen_train.report.figures import logged_curve

    (tmp_path / "logs").mkdir()
    pd.DataFrame({"step": [49, 99, 100], "val/mlm/loss": [3.0, 2.5, 2.4]}).to_csv(tmp_path / "logs" / "metrics.csv")
    row = pd.Series({"path": str(tmp_path), "objective": "mlm", "final_step": 100})
    assert logged_curve(row, "val")["step"].tolist() == [50, 100, 100]
    pd.DataFrame({"step": [0, 9], "train/loss": [5.0, 4.0]}).to_csv(tmp_path / "logs" / "metrics.csv")
    assert logged_curve(row, "train")["step"].tolist() == [1, 10]
