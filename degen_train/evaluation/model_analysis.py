"""degen-analyze PATH [--out DIR]: isotropy of a degen_train run or any HF model directory, in numbers and PNGs."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from degen_train.config.handed_over import Door, read_config_file, recorded_override_texts, with_house_outputs
from degen_train.config.records import Summary, read_record
from degen_train.config.result_keys import has_no_effect_on_result
from degen_train.core.handed_files import HandedOverFileError, given_file_text, no_remote_code, printable
from degen_train.core.io import atomic_write_json
from degen_train.core.own_runs import is_own as is_own_run
from degen_train.core.paths import writable_folder
from degen_train.metrics import plots
from degen_train.metrics.encode import load_encoder, sentence_vectors, token_vectors_by_layer
from degen_train.metrics.frequency import norm_frequency_correlation, rare_frequent_cosine, uniformly_negative_direction
from degen_train.metrics.isotropy import (
    VectorMoments,
    effective_rank,
    isoscore,
    mean_cosine_across_groups,
    mean_pairwise_cosine,
    outlier_dimensions,
    partition_isotropy,
    singular_spectrum,
    tacl_self_similarity,
    top_k_variance_share,
    word_self_similarity,
)
from degen_train.metrics.positional import absolute_position_embeddings, positional_artefacts
from degen_train.metrics.probe_versions import current_versions
from degen_train.metrics.probes import ALIGNED_ABOVE, alignment, read_sts, uniformity
from degen_train.metrics.transforms import clip_outliers, fit_whitening
from degen_train.models.vocabulary import real_rows

log = logging.getLogger("degen_train.evaluation.model_analysis")


def matrix_metrics(vectors: torch.Tensor) -> dict[str, Any]:
    """The isotropy numbers of one matrix of vectors (embedding rows or contextual token vectors)."""
    moments = VectorMoments.of(vectors)
    outliers = outlier_dimensions(moments)
    return {
        "mean_cosine": mean_pairwise_cosine(moments),
        "isoscore": isoscore(moments),
        "partition_isotropy": partition_isotropy(vectors, moments),
        "effective_rank": effective_rank(moments),
        "top1_variance_share": top_k_variance_share(moments, 1),
        "top10_variance_share": top_k_variance_share(moments, 10),
        "outlier_dims": outliers["dims"],
        "outlier_z_scores": outliers["z_scores"],
        "outlier_norm_share": outliers["norm_share"],
        "count": moments.count,
    }


def folder_data_config(path: Path, *, trust_config: bool) -> Any:
    """The run folder's recorded ``data`` config, read as data (config/handed_over.py: each key by its declared role,
    its cache folder this user's own) and, unless ``trust_config``, its inputs (roles.py: data.path, a tokenizer, a hub
    set) naming only files inside the folder: a handed-over folder's config must not make this process read
    /etc/passwd, fetch a data set or create folders where its author chose."""
    door = Door(runs=False, trusted=trust_config, advice=". Pass --corpus FILE to analyse on text of your choice")
    reading = read_config_file(path / "config.yaml", door=door)
    tree = with_house_outputs(reading.tree, reading.dropped)
    data_cfg = OmegaConf.create(tree.get("data") or {})
    data_cfg.cache_dir = os.environ.get("DEGEN_TRAIN_CACHE", str(Path("~/.cache/degen_train").expanduser()))
    inside = path.resolve()
    for key, value in reading.inputs.items():  # inputs a stranger's config names: only its own files
        if not key.startswith("data."):
            continue  # an analysis reads the data section alone
        named = Path(str(value)).expanduser() if isinstance(value, str) else None
        resolved = (named if named.is_absolute() else inside / named).resolve() if named else None
        if resolved is None or (resolved != inside and inside not in resolved.parents):
            raise ValueError(
                f"{path}/config.yaml names {key}={value}, outside the folder: a model folder's config may only "
                f"name files inside it. Pass --corpus FILE to analyse on text of your choice, or --trust-config if "
                f"the folder is your own run"
            )
        OmegaConf.update(data_cfg, key.removeprefix("data."), str(resolved), force_add=True)
    return data_cfg


def corpus_sentences(path: Path, corpus: str | None, limit: int, *, trust_config: bool = False) -> list[str]:
    """Sentences to encode: a text file (one per line), else the run's validation text, else the builtin corpus."""
    if corpus:
        text = given_file_text(corpus, what="--corpus")  # a FIFO or device refused before it is opened
        lines = [line.strip() for line in text.splitlines() if line.strip()]
    elif (path / "config.yaml").exists():
        from degen_train.data.corpus import load_corpus

        data_cfg = folder_data_config(path, trust_config=trust_config)
        loaded = load_corpus(data_cfg)
        documents = loaded.validation
        if documents is None:
            documents = loaded.train.train_test_split(test_size=data_cfg.validation_fraction, seed=data_cfg.split_seed)[
                "test"
            ]
        lines = [p for doc in documents["text"] for p in doc.split("\n") if p.strip()]
    else:
        from degen_train.data.builtin_corpus import builtin_documents

        lines = [p for doc in builtin_documents() for p in doc.split("\n")]
    if not lines:
        raise ValueError(f"no sentences to analyse in {corpus or path}")
    return lines[:limit]


def random_pair_cosines(vectors: torch.Tensor, count: int = 20000, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    first = torch.randint(len(vectors), (count,), generator=generator)
    second = torch.randint(len(vectors), (count,), generator=generator)
    keep = first != second
    return torch.nn.functional.cosine_similarity(vectors[first[keep]].double(), vectors[second[keep]].double(), dim=-1)


def model_name(path: Path) -> str:
    """What a figure's title calls a run: what sets it apart (its swept overrides, else its loss terms) and its final
    step, never a time-stamped folder name; a model folder that is no run: its name."""
    if not os.path.lexists(path / "summary.json"):
        return path.name
    try:  # a handed-over folder's records, typed (config/records.py); one that does not fit: the folder's name
        summary = read_record(path / "summary.json", Summary, what="run summary")
        overrides = recorded_override_texts(path / "overrides.json")
    except HandedOverFileError as error:
        log.warning("%s; the figures are titled by the folder's name", error)
        return path.name
    config = summary.config
    regularizer = (config.model_extra or {}).get("regularizer") if config else None
    terms = [*((config.objective if config else None) or {}), *(regularizer if isinstance(regularizer, dict) else {})]
    shown = [o.lstrip("+~") for o in overrides if not has_no_effect_on_result(o.lstrip("+~").split("=")[0])]
    label = ", ".join(shown) or " + ".join(map(str, terms)) or path.name
    return printable(f"{label}, step {summary.final_step}", 300)


# The parts of an analysis a caller may leave out (degen-analyze --skip, degen-report --analysis-skip).
SKIPPABLE = ("outliers", "generation", "positional", "negative_direction", "figures")


def analyze(
    path: str | Path,
    *,
    out: str | Path | None = None,
    corpus: str | None = None,
    max_sentences: int = 1000,
    batch_size: int = 32,
    trust_config: bool = False,
    pairs: str | Path | None = None,
    skip: Collection[str] = (),
    generation_prompts: int = 200,
) -> dict[str, Any]:
    """metrics.json and figures of a run or HF model folder. ``skip``: parts of SKIPPABLE left out (a report's
    analysis made affordable: six decoders on Wikipedia articles took a user 20 minutes);
    ``generation_prompts``: at most this many greedy continuations (Welleck et al.'s 200 by default).
    ``trust_config``: read the corpus the folder's config names wherever it is (only for folders you made; by
    default only files inside the folder are read, unless the folder is a run this user trained on this machine).
    ``pairs``: an STS file (sentence, sentence, score), whose [CLS] vectors give Wang & Isola's alignment and
    uniformity (``sentence_pairs``)."""
    path = Path(path)
    unknown = sorted(set(skip) - set(SKIPPABLE))
    if unknown:
        raise ValueError(f"cannot skip {', '.join(unknown)}: the parts that can be skipped are {', '.join(SKIPPABLE)}")
    if generation_prompts < 1:
        raise ValueError(f"generation_prompts={generation_prompts} must be at least 1")
    timings: dict[str, float] = {}  # seconds per phase, in metrics.json (make bench reads them)
    sts_pairs = read_sts(pairs) if pairs is not None else None  # a bad file fails before the model loads
    with timed(timings, "load"):
        encoder = load_encoder(path, batch_size=batch_size, max_length=128)
        out_dir = writable_folder(Path(out) if out else path / "analysis", "--out")
        own = is_own_run(path)  # a run this user trained here reads the corpus its config names (own_runs.py)
        sentences = corpus_sentences(path, corpus, max_sentences, trust_config=trust_config or own)
    with timed(timings, "encode"):
        per_layer, ids = token_vectors_by_layer(encoder, sentences)
    with timed(timings, "embedding_metrics"):
        result = embedding_analysis(encoder, sentences, ids)
    with timed(timings, "layer_metrics"):
        layers, curves = layer_analysis(per_layer, ids)
    result["layers"] = layers
    if "positional" not in skip:
        with timed(timings, "positional"):  # Luo et al. 2021: are the last layer's outlier dimensions positional?
            result["positional_artefacts"] = positional_artefacts(
                per_layer[-1], layers[-1]["outlier_dims"], absolute_position_embeddings(encoder.model)
            )
    last = torch.cat(per_layer[-1])
    if "outliers" not in skip:
        with timed(timings, "outliers"):
            result["outliers"] = outlier_analysis(encoder, sentences, luo_dims=layers[-1]["outlier_dims"])
    if "negative_direction" not in skip:
        with timed(timings, "negative_direction_lp"):
            sample = last[torch.randperm(len(last), generator=torch.Generator().manual_seed(0))[:2000]]
            result["last_layer_uniformly_negative_direction"] = uniformly_negative_direction(sample)
    if is_decoder(encoder.model) and "generation" not in skip:
        with timed(timings, "generation"):
            result["generation"] = generation_analysis(encoder, sentences, limit=generation_prompts)
    if sts_pairs is not None:
        with timed(timings, "sentence_pairs"):
            result["sentence_pairs"] = pair_geometry(encoder, sts_pairs, str(pairs))
    result["truncated_sequences"] = encoder.truncated
    if encoder.truncated:
        log.info("%d of %d sentences were longer than %d tokens: truncated", encoder.truncated, len(sentences),
                 encoder.max_length)  # fmt: skip
    if "figures" not in skip:
        with timed(timings, "plots"):
            result["pictures"] = pictures(result, encoder, ids, per_layer, curves, out_dir, title=model_name(path))
    result["skipped"] = sorted(skip)
    result["timings_s"] = timings
    result["probe_versions"] = current_versions()  # which probes measured these numbers (metrics/probe_versions.py)
    atomic_write_json(out_dir / "metrics.json", result)
    return result


def pair_geometry(encoder: Any, pairs: Any, source: str, *, similar_above: float = ALIGNED_ABOVE) -> dict[str, Any]:
    """Alignment over the pairs scored above ``similar_above`` (SimCSE's positives: above 4) and uniformity over every
    sentence, of the last layer's [CLS] vectors (Wang & Isola 2020, as SimCSE and COCO-LM report them)."""
    vectors = sentence_vectors(encoder, pairs.first + pairs.second, pooling="cls")  # (2N, H)
    count = len(pairs.scores)
    similar = torch.tensor(pairs.scores) > similar_above
    if not bool(similar.any()):
        raise ValueError(f"{source}: no pair is scored above {similar_above}; alignment needs similar pairs")
    return {"file": source, "pooling": "cls", "layer": "last", "pairs": count, "similar_above_score": similar_above,
            "similar_pairs": int(similar.sum()), "alignment": alignment(vectors[:count][similar],
            vectors[count:][similar]), "uniformity": uniformity(vectors)}  # fmt: skip


def outlier_analysis(encoder: Any, sentences: list[str], *, luo_dims: list[int]) -> dict[str, Any]:
    """Bondarenko et al.'s kurtosis and ∞-norm on the tensors and blocks their released evaluation reads, massive
    activations of each block's output (Sun et al.), Gu et al.'s sink rate and the heads' entropies on 64-token
    windows (metrics/outlier_sites.py), and which massive-activation dimensions are Luo et al.'s outlier dimensions
    of the last layer."""
    from degen_train.metrics.outlier_sites import released_outliers, sinks_on_windows

    summary = released_outliers(encoder.model, encoder.tokenizer, sentences, batch_size=min(encoder.batch_size, 8))
    sinks = sinks_on_windows(encoder.model, encoder.tokenizer, sentences)
    for layer, entropies in zip(summary["layers"], sinks.pop("attention_entropy_per_head", []), strict=False):
        layer["attention_entropy_per_head"] = entropies
    summary |= sinks
    summary["massive_dims_among_luo_outlier_dims"] = sorted(set(summary["massive_dims"]) & set(luo_dims))
    return summary


def is_decoder(model: Any) -> bool:
    from degen_train.models.architectures import architecture_of

    arch = architecture_of(model.config.model_type)
    return arch is not None and arch.family == "decoder"


def generation_analysis(encoder: Any, sentences: list[str], *, limit: int = 200) -> dict[str, Any]:
    """Repetition of greedy continuations of held-out prefixes (metrics/generation.py, Welleck et al. 2020)."""
    from transformers import AutoModelForCausalLM

    from degen_train.metrics.generation import repetition_probe

    model = AutoModelForCausalLM.from_pretrained(encoder.source, **no_remote_code(encoder.source)).eval()
    documents = [encoder.tokenizer(text, verbose=False)["input_ids"] for text in sentences]
    try:
        return repetition_probe(model, documents, batch_size=encoder.batch_size, limit=limit)
    except ValueError as error:  # short sentences only: say so in metrics.json rather than fail the analysis
        log.warning("generation probe skipped: %s", error)
        return {"skipped": str(error)}


@contextmanager
def timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    timings[phase] = time.perf_counter() - start


def vocab_and_counts(encoder: Any, ids: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(V, H) input embedding rows and (V,) how often each token occurs in the analysed sentences."""
    vocab = real_rows(encoder.model.get_input_embeddings().weight, encoder.model).detach()  # padding left out
    return vocab, torch.bincount(torch.cat(ids), minlength=vocab.shape[0])[: vocab.shape[0]]


def embedding_analysis(encoder: Any, sentences: list[str], ids: list[torch.Tensor]) -> dict[str, Any]:
    """The embedding matrix's numbers: isotropy, frequency views and its singular values."""
    vocab, counts = vocab_and_counts(encoder, ids)

    result: dict[str, Any] = {"model": str(encoder.source), "sentences": len(sentences)}
    result["embedding"] = matrix_metrics(vocab)
    result["embedding"]["norm_log_frequency_spearman"] = norm_frequency_correlation(vocab, counts)
    result["embedding"]["rare_frequent_cosine"] = rare_frequent_cosine(vocab, counts)
    spectra = {
        "raw": singular_spectrum(vocab, centred=False),  # dominated by the mean direction in a cone
        "centred": singular_spectrum(vocab),
    }
    result["embedding"]["singular_values"] = spectra["raw"].tolist()
    result["embedding"]["singular_values_centred"] = spectra["centred"].tolist()
    return result


def layer_analysis(per_layer: list[list[torch.Tensor]],
                   ids: list[torch.Tensor]) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:  # fmt: skip
    """Per layer: isotropy, TaCL's and Ethayarajh's self-similarity, and the mean cosine raw, whitened and
    clipped."""
    layers: list[dict[str, Any]] = []
    curves: dict[str, list[float]] = {"raw": [], "whitened": [], "clipped": []}
    for sequences in tqdm(per_layer, desc="layers", leave=False, disable=None):  # disable=None: off when not a tty
        vectors = torch.cat(sequences)
        groups = torch.cat([torch.full((len(s),), i) for i, s in enumerate(sequences)])
        entry = matrix_metrics(vectors)
        entry.update(tacl_self_similarity(sequences))
        entry["word_self_similarity"] = word_self_similarity(sequences, ids)
        entry["mean_cosine_across_sentences"] = mean_cosine_across_groups(vectors, groups)
        entry["mean_cosine_whitened"] = mean_pairwise_cosine(fit_whitening(vectors)(vectors))
        entry["mean_cosine_clipped"] = mean_pairwise_cosine(clip_outliers(vectors, entry["outlier_dims"]))
        for mode, key in (
            ("raw", "mean_cosine"),
            ("whitened", "mean_cosine_whitened"),
            ("clipped", "mean_cosine_clipped"),
        ):
            curves[mode].append(entry[key])
        layers.append(entry)
    return layers, curves


def pictures(
    result: dict[str, Any],
    encoder: Any,
    ids: list[torch.Tensor],
    per_layer: list[list[torch.Tensor]],
    curves: dict[str, list[float]],
    out_dir: Path,
    *,
    title: str,
) -> dict[str, str]:
    vocab, counts = vocab_and_counts(encoder, ids)
    spectra = {
        "raw": torch.tensor(result["embedding"]["singular_values"]),
        "centred": torch.tensor(result["embedding"]["singular_values_centred"]),
    }
    last, layers = torch.cat(per_layer[-1]), result["layers"]
    drawn = {
        "cone": plots.cone_plot(vocab, counts, out_dir / "cone.png", title=f"embedding rows: {title}"),
        "spectrum": plots.spectrum_plot(spectra, out_dir / "spectrum.png", title=f"singular values: {title}"),
        "layer_cosine": plots.layer_cosine_plot(
            curves, out_dir / "layer_cosine.png", title=f"anisotropy per layer: {title}"
        ),
        "cosine_histogram": plots.cosine_histogram(
            {"embeddings": random_pair_cosines(vocab), "last layer": random_pair_cosines(last)},
            out_dir / "cosine_histogram.png",
            title=f"cosine of random pairs: {title}",
        ),
        "dimension_means": plots.dimension_means_plot(
            outlier_dimensions(last)["means"],
            layers[-1]["outlier_dims"],
            out_dir / "dimension_means.png",
            title=f"mean value per dimension: {title}",
        ),
    }
    if "outliers" in result:  # --skip outliers: no figure of what was not measured
        drawn["outliers"] = plots.outliers_per_layer_plot(
            result["outliers"]["layers"], out_dir / "outliers.png", title=f"outliers per layer: {title}"
        )
    return {name: str(p) for name, p in drawn.items()}
