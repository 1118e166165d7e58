"""Assemble docs/reproduce/README.md from the runs: one section per claim, verdicts computed, not typed."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from degen_train.core.io import atomic_directory
from degen_train.metrics.verdicts import RULE
from degen_train.reproduce.claims import (
    GLUE_AVERAGE,
    PAIRED_FILE,
    SEED_CLAIMS,
    all_claims,
    glue_average_sampling,
    method_claims,
    paired_errors,
    with_paired,
)
from degen_train.reproduce.methods import METHOD_PARTS
from degen_train.reproduce.page import (
    chosen_rates,
    copy_picture,
    glue_columns,
    glue_rates,
    layer_figure,
    mean_std_table,
    row_of,
    spectrum_figure,
)
from degen_train.reproduce.runs import Run

GAO_COLUMNS = ["val perplexity", "valid perplexity (token)", "valid perplexity (word)", "embedding mean cos",
               "IsoScore", "top-1 variance share", "val cosreg", "val loss fall over last fifth %"]  # fmt: skip
RARE_COLUMNS = ["norm~log-freq Spearman", "rare-token mean cos", "frequent-token mean cos",
                "uniformly negative direction"]  # fmt: skip
TACL_COLUMNS = ["STS-B raw", "WiC acc (held-out t)", "last-layer self-similarity", "val tacl", "val mlm"]
COCO_COLUMNS = ["STS-B raw", "similar-pair cos", "random-pair cos", "sentence mean cos", "embedding mean cos",
                "ℓ_align [CLS]", "ℓ_uniform [CLS]"]  # fmt: skip
LUO_COLUMNS = ["STS-B raw", "STS-B whitened", "STS-B clipped", "last-layer mean cos"]


def write_page(cfg: DictConfig, results: list[tuple[Run, dict]], minilm: dict[str, Any] | None) -> Path:
    """Write the page and its figures into cfg.out, replacing what was there (staged, then swapped in)."""
    rows = pd.DataFrame([row_of(run, result) for run, result in results])
    paired = paired_errors(results, all_claims())  # the claims on items both arms were scored on
    rows = with_paired(rows, paired)
    target = Path(str(cfg.out))
    with atomic_directory(target, replace=True) as folder:
        sections = [header(cfg, results)]
        by_part = {part: [(r, x) for r, x in results if r.part == part] for part in ("gao", "tacl", "coco")}
        if "gao" in cfg.parts and by_part["gao"]:
            sections.append(gao_section(rows[rows.part == "gao"], by_part["gao"], folder))
        if len(by_part["tacl"]) > 1:
            sections.append(tacl_section(rows[rows.part == "tacl"], by_part["tacl"], folder))
        if by_part["coco"]:
            sections.append(coco_section(rows[rows.part == "coco"], by_part["coco"], folder))
        teacher = next(((r, x) for r, x in results if r.variant == "teacher"), None)
        if "luo" in cfg.parts and teacher is not None:
            sections.append(luo_section(teacher, minilm, folder))
        sections += [method_section(name, rows) for name in METHOD_PARTS
                     if name in cfg.parts and any(r.part == name for r, _ in results)]  # fmt: skip
        if minilm is not None and {"clipped_softmax", "gated_attention"} & set(cfg.parts):
            sections.append(outlier_reference(minilm))
        if "glue" in cfg.parts and "GLUE average" in rows:
            sections.append(glue_section(cfg, rows, minilm))
        (folder / "README.md").write_text("\n\n".join(sections) + "\n")
        rows.to_csv(folder / "runs.csv", index=False)
        paired.to_csv(folder / PAIRED_FILE, index=False)
    return target / "README.md"


def header(cfg: DictConfig, results: list[tuple[Run, dict]]) -> str:
    minutes: dict[str, float] = {}
    for run, result in results:
        minutes[run.part] = minutes.get(run.part, 0.0) + sum(result["seconds"].values()) / 60
    settings = OmegaConf.to_yaml(cfg, resolve=True).strip()
    timing = ", ".join(f"{part} {value:.1f} min" for part, value in minutes.items())
    return (
        "# Reproduction at CPU scale\n\n"
        f"Written by `make reproduce` (`degen-reproduce`) on {datetime.date.today().isoformat()}; every number "
        "below is read from the runs' own files (`runs.csv` holds one row per run). Means ± standard deviation "
        f"over seeds. The verdicts are judged by one rule (degen_train/metrics/verdicts.py): {RULE}\n\n"
        f"Time spent per part on the machine that first ran it (training, analysis and probes, recorded in each run "
        f"folder): {timing}.\n\n"
        f"<details><summary>settings</summary>\n\n```yaml\n{settings}\n```\n</details>"
    )


def gao_section(rows: pd.DataFrame, results: list[tuple[Run, dict]], folder: Path) -> str:
    spectrum_figure(results, ["mle", "cosreg"], folder / "gao_spectrum.png")
    cones = {v: copy_picture(_picture(results, v, "cone"), folder / f"gao_cone_{v}.png") for v in ("mle", "cosreg")}
    return "\n\n".join(
        [
            "## (a) Gao et al. 2019: CosReg removes the cone and lowers perplexity (their Table 1)",
            "Decoder trained with MLE (γ = 0: the CosReg value is logged, not optimised) and with MLE + γ·CosReg, "
            "γ = 1, otherwise identical (recipe `gao_cosreg`). The last column is how much the validation loss still "
            "fell over the last fifth of the run: a large value means the run is far from converged. This tests a "
            "small Transformer decoder on WikiText-2, not Gao et al.'s AWD-LSTM: `val perplexity` is per token of "
            "our BPE vocabulary (on the validation batches); Gao et al.'s 52.0 → 50.0 is per word (their 33k-word "
            "vocabulary), which `valid perplexity (word)` matches when it is measured (`word_perplexity=true`: the "
            "whole valid.txt, its total NLL over its words).",
            mean_std_table(rows, GAO_COLUMNS),
            *section_claims(rows, "a"),
            scale_note(
                rows,
                "mle",
                "the paper trains to convergence at far larger scale; a cost here may shrink "
                "with steps, and a 128-wide embedding has little room to spread its rows",
            ),  # fmt: skip
            "![normalised singular values](gao_spectrum.png)",
            " ".join(f"![cone, {v}]({name})" for v, name in cones.items() if name),
            "## (b) Gao et al. 2019: rare tokens",
            "Embedding norm against log frequency (Spearman), mean cosine among the rarest and the most frequent "
            "tokens seen in the analysed text, and whether one direction has a negative dot product with almost all "
            "final hidden states (the paper's 'uniformly negative direction'; 1 = found).",
            mean_std_table(rows, RARE_COLUMNS),
            *section_claims(rows, "b"),
        ]
    )


def tacl_section(rows: pd.DataFrame, results: list[tuple[Run, dict]], folder: Path) -> str:
    students = [(r, x) for r, x in results if r.variant != "teacher"]
    layer_figure(students, ["mlm_nsp", "tacl"], "tacl_self_similarity", folder / "tacl_self_similarity.png",
                 "TaCL's self-similarity (mean cos within a sentence)")  # fmt: skip
    rows = rows[rows.variant != "teacher"]
    return "\n\n".join(
        [
            "## (c) Su et al. 2021 (TaCL): a less similar, more discriminative token space",
            "An MLM+NSP teacher, then two students that start from it for the same steps with TaCL's optimiser: "
            "TaCL (MLM + NSP + token contrast) and plain MLM+NSP (the TaCL loss logged with weight 0).",
            mean_std_table(rows, TACL_COLUMNS),
            *section_claims(rows, "c"),
            scale_note(
                rows,
                "mlm_nsp",
                "WiC stays near chance (50%) for both variants of a 2-layer model; TaCL "
                "reports its gains after 150k steps of BERT-base",
            ),  # fmt: skip
            "![self-similarity per layer](tacl_self_similarity.png)",
        ]
    )


def coco_section(rows: pd.DataFrame, results: list[tuple[Run, dict]], folder: Path) -> str:
    pictures = {
        v: copy_picture(_eval_picture(results, v), folder / f"coco_pair_cosines_{v}.png")
        for v in ("electra", "coco_lm")
    }
    return "\n\n".join(
        [
            "## (d) Meng et al. 2021 (COCO-LM): similar sentences apart from random ones",
            "COCO-LM and ELECTRA with the same model, steps and generator rule, each as released (masking, heads, "
            "generator shape and sampling). Cosines of mean-pooled sentence vectors: STS-B dev pairs scored ≥ 4 "
            "against random pairings of the same sentences. ℓ_align and ℓ_uniform (Wang & Isola 2020) of the [CLS] "
            "vectors, as COCO-LM reports them: alignment over the pairs scored above 4 (SimCSE's positives, 208 "
            "of the 1,500), uniformity over every sentence "
            "(lower is better for both).",
            mean_std_table(rows, COCO_COLUMNS),
            *section_claims(rows, "d"),
            scale_note(
                rows,
                "electra",
                "COCO-LM's sequence contrast works on [CLS] over 125k steps of a base model; "
                "here the sentence vectors of either model still share one direction (sentence mean cos "
                "above), so neither separates similar pairs from random ones yet",
            ),  # fmt: skip
            " ".join(f"![{v}: similar vs random pairs]({name})" for v, name in pictures.items() if name),
        ]
    )


def luo_section(teacher: tuple[Run, dict], minilm: dict[str, Any] | None, folder: Path) -> str:
    models = {"our MLM+NSP baseline": teacher[1]} | ({"all-MiniLM-L6-v2": minilm} if minilm else {})
    lines = ["| model | last-layer mean cos (raw / whitened / clipped) | outlier dims, last layer | "
             "their variance explained by position (median over all dims) | outlier dims of the position "
             "embeddings (shared) | STS-B raw / whitened / clipped |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    pictures = []
    for index, (name, result) in enumerate(models.items()):
        last = result["analysis"]["layers"][-1]
        sts = result.get("eval", {}).get("sts", {}).get("sts-dev", {})
        cosines = " / ".join(f"{last[k]:.3f}" for k in ("mean_cosine", "mean_cosine_whitened", "mean_cosine_clipped"))
        probes = " / ".join(f"{sts[m]:.1f}" for m in ("raw", "whitened", "clipped")) if sts else "–"
        lines.append(f"| {name} | {cosines} | {last['outlier_dims'] or 'none'} | "
                     f"{positional_cells(result['analysis'].get('positional_artefacts'))} | {probes} |")  # fmt: skip
        for kind in ("layer_cosine", "dimension_means"):
            copied = copy_picture(result["analysis"]["pictures"].get(kind), folder / f"luo_{kind}_{index}.png")
            if copied:
                pictures.append(f"![{name}: {kind}]({copied})")
    return "\n\n".join(
        [
            "## (e) Luo et al. 2021: outlier dimensions; raw vs whitened vs clipped",
            "Clipping zeroes the outlier dimensions (mean more than 3σ from the other dimensions' means): where a "
            "model has none, as a tiny model trained briefly usually does not, clipping changes nothing. Whitening "
            "removes the common direction of a cone outright (mean cosine ≈ 0). Luo et al. trace the outlier "
            "dimensions to the position embeddings: the share of each outlier dimension's variance over the "
            "analysed tokens that the token's position explains (η², beside the median over all dimensions), and the "
            "position-embedding matrix's own outlier dimensions (the same 3σ rule) with those the last layer shares "
            "(metrics/positional.py).",
            "\n".join(lines),
            " ".join(pictures),
        ]
    )


def glue_section(cfg: DictConfig, rows: pd.DataFrame, minilm: dict[str, Any] | None) -> str:
    """Part (m): the downstream claims of TaCL and COCO-LM, GLUE dev after fine-tuning, against their baselines."""
    from degen_train.finetune.metrics import average_of

    # The average says what it is: with only some of GLUE's eight tasks it is a partial average, named so; WNLI
    # (adversarial dev set) never enters it, as GLUE's own convention has it (finetune.metrics.average_of).
    label = str(average_of({str(task): 0.0 for task in cfg.glue.tasks})["label"])
    tasks = [c for c in rows.columns if c.startswith("GLUE ") and c != GLUE_AVERAGE and not c.endswith(" lr")]
    columns = [*tasks, label]
    from degen_train.finetune.settings import resolve

    name = resolve(OmegaConf.to_container(cfg.glue.finetune))[3]  # named by what ran, not by the preset it started from
    sections = [
        "## (m) Downstream: GLUE dev after fine-tuning the exports of (c) and (d)",
        f"Each student of part (c) and each model of part (d) fine-tuned on {', '.join(map(str, cfg.glue.tasks))} "
        f"with `degen-finetune`'s protocol \"{name}\" (conf/finetune.yaml); each task's score "
        "is at the grid's best rate (by the median over fine-tuning seeds), GLUE's metric ×100 (STS-B: the mean "
        f"of Pearson and Spearman), the {label} is the unweighted mean over those tasks, and the ± is over "
        "pretraining seeds. "
        "`max_train_examples` keeps the first rows of each training split (SST-2's 67k rows become a fixed "
        "subset); the dev splits are whole.",
    ]
    for claim in (c for c in SEED_CLAIMS if c.section == "m"):
        (part, base), other = claim.base, claim.other[1]
        part_rows = rows[(rows.part == part) & rows.variant.isin([base, other])]
        if part_rows.empty or part_rows[GLUE_AVERAGE].isna().all():
            continue
        sampling = glue_average_sampling(part_rows, claim.other)
        sections += [f"{claim.paper}:", mean_std_table(part_rows.rename(columns={GLUE_AVERAGE: label}), columns),
                     f"Learning rate chosen per task: {chosen_rates(part_rows, columns[:-1])}.",
                     claim.line(part_rows, label=label).removesuffix(f" ({claim.paper})"),
                     f"The noise beside the effect adds the seed spread (where an arm has two seeds or more) and the "
                     f"dev sets' own sampling error of the average, {sampling:.2f} points (each task's from its "
                     f"dev split's size and metric)."]  # fmt: skip
    if minilm and minilm.get("glue"):
        reference, rates = glue_columns(minilm["glue"]), glue_rates(minilm["glue"])
        if "GLUE average" in reference:  # none when only WNLI ran: its cell then reads "–", as before
            reference[label] = reference.pop("GLUE average")
        cells = " | ".join(
            (f"{reference[c]:.1f}" + (f" (lr {rates[c + ' lr']:g})" if c + " lr" in rates else "")) if c in reference
            else "–" for c in columns
        )  # fmt: skip
        sections += [
            "A real pretrained model (22M parameters, 6 layers) fine-tuned the same way, one fine-tuning seed, for "
            "scale:",
            f"| model | {' | '.join(columns)} |\n| --- |{' --- |' * len(columns)}\n| all-MiniLM-L6-v2 | {cells} |",
        ]
    sections.append(
        "*Scale: 2-layer encoders pretrained for a few hundred steps; the papers fine-tune BERT-base-sized models "
        "pretrained for 125k–150k steps, with a learning-rate grid and 5 seeds per task.*"
    )
    return "\n\n".join(sections)


def positional_cells(found: dict[str, Any] | None) -> str:
    """Part (e)'s two positional cells: "308: 0.91 (0.02)" and "[308] ([308])"; "–" where not measured."""
    if not found:
        return "– | –"
    shares = ", ".join(f"{d}: {v:.2f}" for d, v in found["position_share_of_outlier_dims"].items()) or "no outliers"
    median = f"{found['position_share_median_over_dims']:.2f}"
    own = found["position_embedding_outlier_dims"]
    shared = found["outlier_dims_shared_with_position_embeddings"]
    embedded = "no position embeddings" if own is None else f"{own} ({shared})"
    return f"{shares} ({median}) | {embedded}"


def section_claims(rows: pd.DataFrame, letter: str) -> list[str]:
    """The verdict lines of a section's claims (reproduce/claims.py), in the order listed there."""
    return [claim.line(rows) for claim in SEED_CLAIMS if claim.section == letter]


def scale_note(rows: pd.DataFrame, base: str, why: str) -> str:
    """Where an effect may be missing: the scale of these runs against the paper's, and the reason given."""
    steps = int(rows.loc[rows["variant"] == base, "steps"].max())
    fall = rows.loc[rows["variant"] == base, "val loss fall over last fifth %"].dropna()
    return f"*Scale: {steps} steps{loss_trend(fall.mean()) if len(fall) else ''}. Where a verdict above does not " \
           f"show: {why}.*"


def loss_trend(fall: float) -> str:
    """The validation loss over a run's last fifth, in words: still falling, flat (within 0.05%), or rising."""
    if fall >= 0.05:
        return f"; validation loss still fell {fall:.1f}% over the last fifth"
    if fall > -0.05:
        return "; validation loss was flat over the last fifth (within 0.05%)"
    return f"; validation loss rose {-fall:.1f}% over the last fifth"


def _picture(results: list[tuple[Run, dict]], variant: str, kind: str) -> str | None:
    return next((x["analysis"]["pictures"][kind] for r, x in results if r.variant == variant and r.seed == 0), None)


def _eval_picture(results: list[tuple[Run, dict]], variant: str) -> str | None:
    return next(
        (x["eval"]["sts"]["sts-dev"]["sentence_geometry"].get("picture") for r, x in results
         if r.variant == variant and r.seed == 0 and "eval" in x),
        None,
    )  # fmt: skip


def outlier_reference(minilm: dict[str, Any]) -> str:
    """Part (n)'s real-model line: all-MiniLM-L6-v2's outliers, measured as the runs' are (degen-analyze)."""
    outliers = minilm["analysis"].get("outliers") or {}
    if "max_kurtosis" not in outliers:
        return "Reference: all-MiniLM-L6-v2's outliers were not measured (an analysis from before they existed)."
    dims = minilm["analysis"]["layers"][-1].get("outlier_dims") or []
    return (
        f"Reference, a real pretrained encoder (all-MiniLM-L6-v2, 6 layers, H = 384, the same sentences): max "
        f"kurtosis {outliers['max_kurtosis']:.1f}, max ‖x‖∞ {outliers['max_inf_norm']:.1f}, "
        f"{outliers['massive_activations']} massive activations, attention sink "
        f"{outliers['attention_sink_rate']:.1f}% (Gu et al.'s ε = 0.3), Luo's outlier dimensions of its last "
        f"layer {dims}."
    )


def evaluators_line(rows: pd.DataFrame) -> list[str]:
    """'Evaluators: coherence_simcse under X (its pooling); MAUVE featurized by Y', from the runs' eval.json."""
    named = {key.removeprefix("evaluator "): sorted({str(v) for v in rows[key].dropna()}) for key in rows.columns
             if str(key).startswith("evaluator ")}  # fmt: skip
    if not named:
        return []
    parts = []
    if named.get("coherence_encoder"):
        pooling = named.get("coherence_encoder_pooling") or ["pooling not recorded"]
        parts.append(f"coherence_simcse under {', '.join(named['coherence_encoder'])} ({', '.join(pooling)})")
    if named.get("coherence_model"):
        parts.append(f"coherence_opt under {', '.join(named['coherence_model'])}")
    if named.get("mauve_featurizer"):
        parts.append(f"MAUVE featurized by {', '.join(named['mauve_featurizer'])}")
    return [f"Evaluators: {'; '.join(parts)}."] if parts else []


def method_section(name: str, rows: pd.DataFrame) -> str:
    """The part's table (baseline and method, mean ± std over seeds) and its verdicts."""
    part = METHOD_PARTS[name]
    base_part, base_variant = part.baseline
    baseline = (rows.part == base_part) & (rows.variant == base_variant)
    own = (rows.part == name) & rows.variant.isin([*part.shown, name, "control"])
    chosen = rows[baseline | own]
    against_base, against_control = ([claim.line(chosen) for claim in claims] for claims in method_claims(name))
    if against_control and (chosen.variant == "control").any():
        against_control = ["Against the control:", *against_control]
    else:
        against_control = []
    return "\n\n".join(
        [
            f"## {part.title}",
            part.description,
            mean_std_table(chosen, part.columns),
            *([part.note] if part.note else []),
            *evaluators_line(chosen),
            *against_base,
            *against_control,
            scale_note(chosen, name, part.why),
        ]
    )
