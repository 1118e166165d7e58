"""One row per run from its files; headline columns first; mean and std over seeds in their own columns."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from degen_train.config.handed_over import recorded_override_texts
from degen_train.config.records import Analysis, Failure, Summary, WandbSummary, read_record
from degen_train.core.handed_files import HandedOverFileError
from degen_train.core.paths import links_in, shown_links
from degen_train.run.sweep import FAILED

SEED_KEYS = ("seed",)
HUMAN = "generation/human"  # the human continuations' measures: the reference a forest plot draws, never judged
ANALYZE_GREEDY = "analysis/analyze_greedy"  # degen-analyze's greedy continuations, apart from generation/greedy
SWEPT = "swept:"  # column prefix of a swept override
# Headline metrics, in the order a reader looks for them, and which way is better. Ranked by the objective's own
# validation loss, never by val_loss (objective + weighted regularizers: a weight-0 baseline would win by leaving its
# regularizer out), and never by tokens/s or MFU, which measure the machine's load as much as the method.
HEADLINE = {
    "val_objective_loss": "min",
    "val_perplexity": "min",
    "isotropy/embedding/mean_cosine": "min",
    "isotropy/embedding/isoscore": "max",
    "wic/accuracy": "max",
    "glue/average": "max",
}
SUMMARY_KEYS = ("final_step", "val_loss", "val_perplexity", "val_perplexity_of", "train_loss", "tokens_per_s", "mfu",
                "mfu_total")  # fmt: skip
ALIKE = ("objective", "val_perplexity_of")  # what runs must share for their losses to be ranked together


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """Run directories (with summary.json, failed.json or config.yaml) at or below the given paths."""
    runs: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        candidates = [path] if _is_run(path) else sorted(p.parent for p in path.rglob("config.yaml"))
        candidates += sorted(p.parent for p in path.rglob(FAILED) if p.parent not in candidates)
        # a member that is a link is never read through, and never silently dropped either (rglob does not enter
        # it): it is listed, and its row says it is unreadable (issue 72.7, LK4)
        candidates += [link for link in _linked_folders(path) if link not in candidates]
        runs.extend(c for c in candidates if c not in runs)
    if not runs:
        raise ValueError(f"no runs found in {', '.join(map(str, paths))} (a run has config.yaml or summary.json)")
    return runs


def _linked_folders(root: Path) -> list[Path]:
    """Links to folders at any depth below ``root`` that hold a run's files where they point (never entered)."""
    found = []
    if root.is_dir() and not root.is_symlink():
        for folder, names, _ in os.walk(root):  # os.walk does not follow links: a link to a folder is in ``names``
            for name in names:
                entry = Path(folder) / name
                if entry.is_symlink() and _is_run(entry):
                    found.append(entry)
    return sorted(found)


def _is_run(path: Path) -> bool:
    return any(os.path.lexists(path / name) for name in ("summary.json", FAILED, "config.yaml"))


def swept_values(run: Path) -> dict[str, str]:
    """The overrides that define the run (RUN/overrides.json, or failed.json's record)."""
    path = run / "overrides.json"
    if os.path.lexists(path):
        overrides = recorded_override_texts(path)  # shown, never run (config/handed_over.py)
    elif os.path.lexists(run / FAILED):
        overrides = read_record(run / FAILED, Failure, what="failure record", within=run).overrides
    else:
        overrides = []
    pairs = [o.lstrip("+~").split("=", 1) for o in overrides if "=" in o]
    return dict(pairs)


def _wandb_summary(run: Path) -> dict[str, Any]:
    """Summary metrics of an offline wandb run in RUN/wandb (when the run wrote no summary.json): its plain values.
    wandb's own latest-run link is passed over, never read through."""
    for path in sorted(run.glob("wandb/*run-*/files/wandb-summary.json")):
        if path.parents[1].is_symlink():
            continue
        summary = read_record(path, WandbSummary, what="wandb summary", within=run).model_extra or {}
        return {k: v for k, v in summary.items() if not k.startswith("_") and isinstance(v, int | float | str | None)}
    return {}


def run_row(run: Path) -> dict[str, Any]:
    """One run's row from its records, each read through its typed schema (config/records.py). A record that does
    not fit, or a link anywhere in the folder (wandb's own aside), makes the row "unreadable", its error the one line
    that names the file and entry; the others stand."""
    row: dict[str, Any] = {"run": run.name, "status": "incomplete", "path": str(run)}
    try:
        if run.is_symlink():
            raise HandedOverFileError(f"{run} is a link (to {os.readlink(run)}): a handed-over run is read from its "
                                      f"own files only, never through a link; replace it by a copy of the folder")
        refuse_links_inside(run)
        return _filled_row(run, row)
    except HandedOverFileError as error:  # row keeps what was read before the record that does not fit
        return row | {"status": "unreadable", "error": str(error)}


def refuse_links_inside(run: Path) -> None:
    """A handed-over run folder is read from its own files only: a link in it (``seed=1/analysis`` pointing at a
    folder elsewhere) is refused by name, wandb's own links aside."""
    links = links_in(run)
    if links:
        raise HandedOverFileError(
            f"{run} holds links ({shown_links(links)}): a handed-over run is read from its own files only, never "
            f"through a link; replace each by a copy of what it points to"
        )


def _validation_error(record: dict | None) -> float | None:
    """The bootstrap error over validation batches of a run's val_perplexity (data/validation_items.py), or None
    where the run kept no fitting record (written before it was kept; the report pairs or names it)."""
    from degen_train.metrics.evaluation_noise import ItemRecordError, ItemScores, bootstrap_se

    try:
        return bootstrap_se(ItemScores.of(record)) if record else None
    except ItemRecordError:
        return None


def _filled_row(run: Path, row: dict[str, Any]) -> dict[str, Any]:
    row |= {SWEPT + k: v for k, v in swept_values(run).items()}
    if os.path.lexists(run / FAILED):
        failure = read_record(run / FAILED, Failure, what="failure record", within=run)
        return row | {"status": "failed", "error": failure.error}
    if not os.path.lexists(run / "summary.json"):
        wandb = _wandb_summary(run)
        return row | {"status": "finished (wandb)", **wandb} if wandb else row
    summary = read_record(run / "summary.json", Summary, what="run summary", within=run).model_dump()
    row["status"] = "finished"
    row |= {k: summary.get(k) for k in SUMMARY_KEYS}
    # Every term's own value, weighted or not: a weight-0 baseline still reports its regularizer.
    row |= {f"val/{k}/loss": v for k, v in (summary.get("val_terms") or {}).items()}
    objective = list((summary.get("config") or {}).get("objective") or {})
    own = [(summary.get("val_terms") or {}).get(term) for term in objective]
    if objective and None not in own:  # the objective's terms, unweighted: the same loss with or without regularizers
        row["objective"] = "+".join(objective)
        row["val_objective_loss"] = sum(own)
    row |= {f"train/{k}/loss": v for k, v in (summary.get("train_terms") or {}).items()}
    error = _validation_error((summary.get("items") or {}).get("val_perplexity"))
    if error is not None:  # over validation batches: used where the arms' batches cannot be paired
        row["val_perplexity sampling error"] = error
    averaging = summary.get("weight_averaging") or {}
    if averaging.get("val_loss") is not None:  # the weight average, validated beside the trained model
        row["average/val_loss"], row["average/val_perplexity"] = averaging["val_loss"], averaging.get("val_perplexity")
        beside = [(summary.get("val_metrics") or {}).get(f"val_average/{term}/loss") for term in objective]
        if objective and None not in beside:
            row["average/val_objective_loss"] = sum(beside)
    # TaCL's within-sentence self-similarity, under its own name also for runs logged before the rename
    row |= {re.sub(r"/self_similarity$", "/tacl_self_similarity", k): v for k, v in summary.get("isotropy", {}).items()}
    analysis = run / "analysis" / "metrics.json"
    if os.path.lexists(analysis):  # degen-analyze's numbers on the export (degen-report runs it when missing)
        analysed = read_record(analysis, Analysis, what="analysis", within=run).model_dump()
        last = analysed["layers"][-1]
        row["analysis/last_layer_mean_cosine"] = last.get("mean_cosine")
        row["analysis/last_layer_tacl_self_similarity"] = (last.get("tacl_self_similarity") if
                                                           last.get("tacl_self_similarity") is not None else
                                                           last.get("self_similarity"))  # fmt: skip
        if last.get("word_self_similarity") is not None:
            row["analysis/last_layer_word_self_similarity"] = last["word_self_similarity"]
        # a decoder's repetition of its own greedy text under degen-analyze's protocol (its prompts and length),
        # named apart from eval.generate's generation/greedy/* (SimCTG's protocol): two protocols of one decoding
        for key, value in (analysed.get("generation") or {}).items():
            if key != "prefixes" and value is not None:
                row[f"{ANALYZE_GREEDY}/{key}"] = value
        outliers = analysed.get("outliers") or {}  # absent in an analysis written before the outlier measures
        for key in ("max_kurtosis", "max_inf_norm", "massive_activations", "attention_sink_rate"):
            if key in outliers:
                row[f"analysis/{key}"] = outliers[key]
    evaluation = summary.get("eval", {})
    for name, scores in evaluation.get("sts", {}).items():
        row[f"sts/{name}"] = scores.get("raw")
        if scores.get("n"):  # the pairs scored: the sampling error of a Spearman without per-pair scores
            row[f"sts/{name} items"] = scores["n"]
    if evaluation.get("w8a8"):  # the export's quantization gap (eval.w8a8)
        gap = evaluation["w8a8"]
        row["w8a8/perplexity_gap"] = gap.get("perplexity_gap")
        if gap.get("sts_gap") is not None:
            row["w8a8/sts_gap"] = gap["sts_gap"]
    generation = evaluation.get("generation") or {}  # eval.generate: each decoding's degeneration measures
    for decoding, measures in (generation.get("decodings") or {}).items():
        errors = (generation.get("sampling_error") or {}).get(decoding) or {}
        for key in ("rep_2", "rep_3", "rep_4", "diversity", "perplexity_under_model", "coherence_simcse",
                    "coherence_opt", "mauve", "mean_kept_tokens", "ended_early"):  # fmt: skip
            if measures.get(key) is not None:
                row[f"generation/{decoding}/{key}"] = measures[key]
                if errors.get(key) is not None:  # over prompts: the evaluation set's error without per-item scores
                    row[f"generation/{decoding}/{key} sampling error"] = errors[key]
    for key, value in (generation.get("human") or {}).items():  # the human continuations: a reference, not judged
        if isinstance(value, int | float):
            row[f"{HUMAN}/{key}"] = value
    for task, values in ((evaluation.get("lm_eval") or {}).get("tasks") or {}).items():  # eval.lm_eval
        for key, value in values.items():
            metric, comma, _ = key.partition(",")
            if comma and not metric.endswith("_stderr") and isinstance(value, int | float):
                row[f"lm_eval/{task}/{metric}"] = value
    if evaluation.get("wic"):
        wic = evaluation["wic"]["raw"]
        row["wic/accuracy"] = wic.get("accuracy", wic.get("accuracy_threshold_fitted_on_scored_items"))
        if evaluation["wic"].get("n"):
            row["wic/accuracy items"] = evaluation["wic"]["n"]
    glue = summary.get("glue") or {}  # eval.glue: each task's dev score (mean over fine-tuning seeds), the average
    for task, scores in (glue.get("tasks") or {}).items():
        row[f"glue/{task}"] = scores["mean"]
        base = scores.get("baselines") or {}
        row |= {f"glue/{task} {kind}": base[kind] for kind in ("majority", "chance") if kind in base}
        if scores.get("one_class"):  # the score is a class's share, not what the model learned
            row[f"glue/{task} flag"] = scores["one_class"]
    if glue.get("average") is not None:
        row["glue/average"] = glue["average"]
    return row


def collect(runs: Sequence[Path]) -> tuple[pd.DataFrame, dict[str, str]]:
    """The runs table, headline columns first, and the overrides every run shares (taken out of it)."""
    table = pd.DataFrame([run_row(run) for run in runs])
    swept = [c for c in table.columns if c.startswith(SWEPT)]
    common: dict[str, str] = {}
    # What every run shares is judged over the runs whose records were read: an unreadable member holds no swept
    # value, and counting its blanks made every recorded key look swept (issue 72.7, V18: a baseline nobody swept)
    readable = table[table["status"] != "unreadable"] if "status" in table else table
    if len(readable) > 1:
        for column in swept:
            values = readable[column].astype(str).unique()
            if len(values) == 1:
                common[column.removeprefix(SWEPT)] = values[0]
        table = table.drop(columns=[SWEPT + k for k in common])
    for column in table.columns:  # swept values as numbers where they are numbers, for plots and sorting
        if column.startswith(SWEPT):
            numeric = pd.to_numeric(table[column], errors="coerce")
            if numeric.notna().all():
                table[column] = numeric
    return table[headline_order(table.columns)], common


def headline_order(columns: Sequence[str]) -> list[str]:
    """run, status, swept values, val loss and perplexity, each term's value, geometry, probes, speed, the rest."""
    columns = list(columns)
    swept = sorted(c for c in columns if c.startswith(SWEPT))
    terms = sorted(c for c in columns if c.startswith(("val/", "train/")) and c.endswith("/loss"))
    probes = sorted(c for c in columns if c.startswith(("sts/", "wic/", "w8a8/")))
    probes += sorted(c for c in columns if c.startswith("glue/") and c != "glue/average")
    probes += ["glue/average"] if "glue/average" in columns else []
    analysis = sorted(c for c in columns if c.startswith("analysis/"))
    first = ["run", "status", *swept, "objective", "val_objective_loss", "val_perplexity", "val_loss"]
    first += ["average/val_objective_loss", "average/val_perplexity", *terms]
    monitored = ["outliers/max_kurtosis", "outliers/max_inf_norm", "outliers/massive_activations"]
    first += ["isotropy/embedding/mean_cosine", "isotropy/embedding/isoscore", *monitored, *analysis, *probes]
    first += ["tokens_per_s", "mfu"]
    first = [c for c in dict.fromkeys(first) if c in columns]
    return first + [c for c in columns if c not in first]


def headline_columns(columns: Sequence[str]) -> list[str]:
    """The few columns a reader compares: the setting, the objective's own loss and perplexity, the geometry and
    the probes (the full table has the rest)."""
    columns = list(columns)
    keep = ("run", "status", "seeds", "objective", "val_objective_loss", "val_perplexity", "val_perplexity_of")
    keep += ("average/val_objective_loss", "average/val_perplexity")
    keep += ("isotropy/embedding/mean_cosine", "isotropy/embedding/isoscore", "wic/accuracy", "glue/average")
    chosen = []
    for column in columns:
        base = str(column).removesuffix(" mean").removesuffix(" std")
        if str(column).startswith(SWEPT) or base in keep or (base.startswith("sts/") and not base.endswith(" items")):
            chosen.append(column)
    return chosen


def seed_groups(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds of every numeric column, per setting (the swept keys other than the seed)."""
    swept = [c for c in table.columns if c.startswith(SWEPT)]
    grouping = [c for c in swept if c.removeprefix(SWEPT) not in SEED_KEYS]
    if len(grouping) == len(swept):
        return pd.DataFrame()
    finished = table[table["status"].str.startswith("finished")]
    numeric = [c for c in finished.select_dtypes("number").columns if c not in swept]
    if finished.empty or not numeric:
        return pd.DataFrame()
    groups = finished.groupby(grouping, dropna=False, sort=True) if grouping else finished.groupby(lambda _: "all")
    stats = groups[numeric].agg(["mean", "std"])
    stats.columns = [f"{metric} {stat}" for metric, stat in stats.columns]
    stats.insert(0, "seeds", groups.size())
    ordered = [f"{c} {s}" for c in headline_order(numeric) for s in ("mean", "std")]
    alike = [c for c in ALIKE if c in finished]  # what a setting's runs share: the objective, the perplexity's head
    for column in alike:
        stats[column] = groups[column].first()
    return stats[["seeds", *alike, *ordered]].reset_index()
