"""The results page of `make reproduce`: tables (mean ± std over seeds) and figures.

Every number on the page comes from the runs' own files (summary.json, analysis/metrics.json,
eval/eval.json, logs/metrics.csv); nothing is typed by hand. The verdicts are reproduce/claims.py's, by the rule of
metrics/verdicts.py.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from degen_train.metrics.plots import save_figure  # noqa: E402
from degen_train.reproduce.methods import GENERATION_MEASURES  # noqa: E402
from degen_train.reproduce.runs import Run  # noqa: E402


def row_of(run: Run, result: dict[str, Any]) -> dict[str, Any]:
    """One run as one flat row of the numbers the page shows."""
    summary, analysis = result["summary"], result["analysis"]
    embedding, layers = analysis["embedding"], analysis["layers"]
    versions = {**(analysis.get("probe_versions") or {}), **(result.get("eval", {}).get("probe_versions") or {}),
                **((result.get("w8a8") or {}).get("probe_versions") or {})}  # fmt: skip
    row = {
        "part": run.part,
        "variant": run.variant,
        "seed": run.seed,
        "steps": summary["final_step"],
        "val perplexity": summary.get("val_perplexity"),
        "embedding mean cos": embedding["mean_cosine"],
        "IsoScore": embedding["isoscore"],
        "top-1 variance share": embedding["top1_variance_share"],
        "norm~log-freq Spearman": embedding["norm_log_frequency_spearman"],
        "rare-token mean cos": embedding["rare_frequent_cosine"]["rare"],
        "frequent-token mean cos": embedding["rare_frequent_cosine"]["frequent"],
        "uniformly negative direction": float(analysis["last_layer_uniformly_negative_direction"]["exists"]),
        "last-layer self-similarity": tacl_self_similarity_of(layers[-1]),
        "last-layer mean cos": layers[-1]["mean_cosine"],
        "last-layer IsoScore": layers[-1]["isoscore"],
        "val loss fall over last fifth %": convergence(run.folder),
    }
    outliers = analysis.get("outliers") or {}  # degen-analyze's outlier measures (absent in older analyses)
    if "max_kurtosis" in outliers:
        row.update({"max kurtosis": outliers["max_kurtosis"], "max ‖x‖∞": outliers["max_inf_norm"],
                    "outlier dims (Luo)": float(len(layers[-1].get("outlier_dims") or []))})  # fmt: skip
        if outliers.get("attention_sink_rate") is not None:
            row["attention sink %"] = outliers["attention_sink_rate"]
    positional = analysis.get("positional_artefacts") or {}  # Luo et al.: η² of the outlier dims (part (o))
    shares = list((positional.get("position_share_of_outlier_dims") or {}).values())
    if "position_share_of_outlier_dims" in positional:
        row["position η² of outlier dims"] = sum(shares) / len(shares) if shares else None
    if result.get("perplexity"):  # the whole valid.txt: per token and per word (word_perplexity=true)
        row["valid perplexity (token)"] = result["perplexity"]["value"]
        row["valid perplexity (word)"] = result["perplexity"].get("per_word_perplexity")
    if result.get("w8a8"):  # the W8A8 probe's perplexity gap (part (n))
        row["W8A8 gap"] = result["w8a8"]["perplexity_gap"]
    generation = analysis.get("generation") or {}
    if "seq_rep_4" in generation:
        row.update({"seq-rep-4": generation["seq_rep_4"], "rep/128": generation["rep_128"],
                    "distinct-4": generation["distinct_4"]})  # fmt: skip
    generated = (summary.get("eval") or {}).get("generation") or {}  # eval.generate: the released protocol
    for key in ("coherence_encoder", "coherence_encoder_pooling", "coherence_model", "mauve_featurizer"):
        if generated.get(key):  # each evaluator named beside the numbers it made
            row[f"evaluator {key}"] = generated[key]
    for decoding, measures in (generated.get("decodings") or {}).items():
        errors = (generated.get("sampling_error") or {}).get(decoding) or {}
        for column, key in GENERATION_MEASURES.items():
            row[f"{decoding} {column}"] = measures.get(key)
            if errors.get(key) is not None:  # over prompts: the error a claim adds where no per-prompt terms are kept
                row[f"{decoding} {column} sampling error"] = errors[key]
    for term, value in (summary.get("val_terms") or {}).items():
        row[f"val {term}"] = value
    sts = result.get("eval", {}).get("sts", {}).get("sts-dev")
    if sts:
        row.update({f"STS-B {m}": sts[m] for m in ("raw", "whitened", "clipped")})
        geometry = sts["sentence_geometry"]
        row["sentence mean cos"] = geometry["mean_cosine_all_sentences"]
        row["similar-pair cos"] = geometry["similar_pairs_mean_cosine"]
        row["random-pair cos"] = geometry["random_pairs_mean_cosine"]
    cls = result.get("eval_cls", {}).get("sts", {}).get("sts-dev")
    if cls:
        row["STS-B raw [CLS]"] = cls["raw"]
        geometry = cls["sentence_geometry"]  # Wang & Isola's measures on [CLS], as COCO-LM reports them
        if geometry.get("uniformity") is not None:
            row["ℓ_align [CLS]"], row["ℓ_uniform [CLS]"] = geometry["alignment"], geometry["uniformity"]
    for term, value in (summary.get("train_terms") or {}).items():
        row[f"train {term}"] = value  # the last training step's value (a loss stuck at chance shows here)
    wic = result.get("eval", {}).get("wic")
    if wic:
        row["WiC acc (held-out t)"] = wic["raw"].get("accuracy") * 100
    row.update(glue_columns(result.get("glue")))
    row.update(glue_rates(result.get("glue")))
    if versions:  # which version of each probe measured the row (metrics/probe_versions.py; claims.older_probe)
        row["probe versions"] = json.dumps(versions, sort_keys=True)
    return row


GLUE_NAMES = {"rte": "RTE", "sst2": "SST-2", "stsb": "STS-B", "mrpc": "MRPC", "cola": "CoLA", "qnli": "QNLI",
              "qqp": "QQP", "mnli": "MNLI", "wnli": "WNLI"}  # fmt: skip


def glue_columns(glue: dict[str, Any] | None) -> dict[str, float]:
    """Part (m): each task's dev score after fine-tuning (GLUE's metric, ×100) and their average."""
    if not glue:
        return {}
    columns = {f"GLUE {GLUE_NAMES.get(name, name)}": task["mean"] for name, task in glue["tasks"].items()}
    return {**columns, "GLUE average": glue["average"]}


def glue_rates(glue: dict[str, Any] | None) -> dict[str, float]:
    """Part (m): the learning rate each task's score comes from (the grid's best by the median over seeds)."""
    if not glue:
        return {}
    return {f"GLUE {GLUE_NAMES.get(name, name)} lr": task["lr"] for name, task in glue["tasks"].items()}


def chosen_rates(rows: pd.DataFrame, columns: list[str]) -> str:
    """'tacl: RTE 0.0005, SST-2 0.0005; ...': the rates behind each variant's GLUE scores (several pretraining
    seeds may choose differently: joined by /)."""
    parts = []
    for variant, group in rows.groupby("variant", sort=False):
        rates = [f"{c.removeprefix('GLUE ')} {'/'.join(f'{r:g}' for r in sorted(group[c + ' lr'].dropna().unique()))}"
                 for c in columns if c + " lr" in group]  # fmt: skip
        parts.append(f"{variant}: {', '.join(rates)}")
    return "; ".join(parts)


def convergence(folder: Path) -> float | None:
    """How much the validation loss still fell over the last fifth of the run, in percent."""
    path = folder / "logs" / "metrics.csv"
    if not path.exists():
        return None
    with open(path, newline="") as handle:
        points = sorted((int(r["step"]), float(r["val/loss"])) for r in csv.DictReader(handle) if r.get("val/loss"))
    if len(points) < 2:
        return None
    last_step, last = points[-1]
    # The validation point nearest to 80% of the run (the final validation repeats the last periodic one).
    earlier = [value for step, value in points if step <= 0.8 * last_step]
    return 100 * (earlier[-1] - last) / earlier[-1] if earlier else None


def mean_std_table(rows: pd.DataFrame, columns: list[str]) -> str:
    """Markdown: one line per variant, each column as mean ± std over its seeds."""
    present = [c for c in columns if c in rows and rows[c].notna().any()]
    grouped = rows.groupby("variant", sort=False)[present]
    means, stds, counts = grouped.mean(), grouped.std(), grouped.size()
    lines = ["| variant | seeds | " + " | ".join(present) + " |", "| --- | --- |" + " --- |" * len(present)]
    for variant in means.index:
        cells = [_format(means.at[variant, c], stds.at[variant, c]) for c in present]
        lines.append(f"| {variant} | {counts[variant]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _format(mean: float, std: float) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    digits = 1 if abs(mean) >= 10 else 3
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def spectrum_figure(results: list[tuple[Run, dict]], variants: list[str], path: Path) -> Path:
    """Normalised singular values of the embedding matrix, raw and centred, seed 0 of each variant."""
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for run, result in results:
        if run.variant not in variants or run.seed != 0:
            continue
        for axis, key in zip(axes, ("singular_values", "singular_values_centred"), strict=True):
            values = np.asarray(result["analysis"]["embedding"][key])
            axis.semilogy(np.arange(1, len(values) + 1), values / values[0], label=run.variant)
    for axis, title in zip(axes, ("raw (a cone: one dominant direction)", "centred"), strict=True):
        axis.set_xlabel("index")
        axis.set_ylabel("singular value / largest")
        axis.set_title(title)
        axis.legend()
    return save_figure(figure, path)


def tacl_self_similarity_of(layer: dict) -> float:
    """A layer's TaCL self-similarity, as analyses name it (``self_similarity`` before the rename)."""
    return layer["tacl_self_similarity"] if "tacl_self_similarity" in layer else layer["self_similarity"]


def layer_figure(rows: list[tuple[Run, dict]], variants: list[str], key: str, path: Path, ylabel: str) -> Path:
    """A per-layer metric, mean ± std over seeds, one line per variant."""
    figure, axis = plt.subplots(figsize=(5.5, 4))
    for variant, marker in zip(variants, ("o", "s", "^", "D"), strict=False):
        curves = np.array(
            [[tacl_self_similarity_of(layer) if key == "tacl_self_similarity" else layer[key]
              for layer in r["analysis"]["layers"]] for run, r in rows if run.variant == variant]  # fmt: skip
        )
        if len(curves) == 0:
            continue
        axis.errorbar(
            range(curves.shape[1]), curves.mean(0), yerr=curves.std(0), marker=marker, capsize=3, label=variant
        )
    axis.set_xticks(range(curves.shape[1]))
    axis.set_xlabel("layer (0 = embeddings)")
    axis.set_ylabel(ylabel)
    axis.legend()
    return save_figure(figure, path)


def copy_picture(source: str | Path | None, target: Path) -> str | None:
    if source is None or not Path(source).exists():
        return None
    shutil.copyfile(source, target)
    return target.name
