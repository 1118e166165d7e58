"""STS and WiC probes: readers for the distribution formats, and scores in raw / whitened / clipped modes."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import Tensor

from degen_train.core.handed_files import given_file_text
from degen_train.metrics.evaluation_noise import item_id
from degen_train.metrics.isotropy import mean_pairwise_cosine
from degen_train.metrics.transforms import clip_detected_outliers, clip_outliers, fit_whitening

MODES = ("raw", "whitened", "clipped")
SENTENCE_COLUMNS = [("sentence1", "sentence2"), ("sentence_A", "sentence_B"), ("s1", "s2"), ("text1", "text2")]
SCORE_COLUMNS = ["score", "relatedness_score", "similarity", "label"]


@dataclass(frozen=True)
class SentencePairs:
    first: list[str]
    second: list[str]
    scores: list[float]


def _score(value: str, path: Path, line: int) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{path}, line {line}: score {value!r} is not a number") from None


def read_sts(path: str | Path, *, scored: bool = True) -> SentencePairs:
    """STS-B distribution (tab-separated, no header: genre, file, year, id, score, s1, s2, ...), SICK (header
    with sentence_A, sentence_B, relatedness_score), or csv/tsv/jsonl with two sentence columns and a score.
    ``scored=False``: pairs to fit whitening on, where a split without labels (GLUE's STS-B test.tsv) is allowed
    (its scores are NaN)."""
    path = Path(path)
    text = given_file_text(path, what="STS file")  # a FIFO or device refused before it is opened
    if path.suffix == ".jsonl":
        return _from_records(_json_rows(text, path), path, header_line=0, scored=scored)
    lines = text.splitlines()
    first = lines[0].split("\t") if lines else []
    if len(first) >= 7 and _is_number(first[4]) and not any(c in first for c in ("sentence_A", "sentence1")):
        pairs = SentencePairs([], [], [])
        for number, line in enumerate(lines, 1):
            fields = line.split("\t")  # no quoting: sentences contain '"'
            if len(fields) < 7:
                raise ValueError(f"{path}, line {number}: {len(fields)} tab-separated fields, expected at least 7")
            pairs.scores.append(_score(fields[4], path, number))
            pairs.first.append(fields[5])
            pairs.second.append(fields[6])
        return pairs
    delimiter = "\t" if "\t" in (lines[0] if lines else "") else ","
    # tab-separated files (GLUE's STS-B, SICK) quote nothing: a sentence's '"' is text, not the start of a field
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    records = list(csv.DictReader(lines, delimiter=delimiter, quoting=quoting))
    return _from_records(records, path, header_line=1, scored=scored)


def _json_rows(text: str, path: Path) -> list[dict]:
    """Each non-blank line of a JSON-lines STS file as one JSON object; ValueError naming the line otherwise (not
    JSON, nested past any STS row's depth, or not an object)."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as error:
            reason = "nested too deep" if isinstance(error, RecursionError) else str(error)
            raise ValueError(f"{path}, line {number}: not JSON ({reason}); each line is one object with two "
                             f"sentences and a score") from None  # fmt: skip
        if not isinstance(row, dict):
            raise ValueError(f"{path}, line {number}: a JSON {type(row).__name__}, not an object with two sentences "
                             f"and a score")  # fmt: skip
        rows.append(row)
    return rows


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _from_records(records: list[dict], path: Path, header_line: int, scored: bool = True) -> SentencePairs:
    if not records:
        raise ValueError(f"{path} has no rows")
    columns = [str(c) for c in records[0] if c is not None]  # csv's None key: a row longer than the header
    sentences = next(((a, b) for a, b in SENTENCE_COLUMNS if a in columns and b in columns), None)
    score = next((c for c in SCORE_COLUMNS if c in columns), None)
    if sentences is None or (score is None and scored):
        raise ValueError(
            f"{path}: needs two sentence columns ({' / '.join('+'.join(p) for p in SENTENCE_COLUMNS)}) "
            f"and a score column ({', '.join(SCORE_COLUMNS)}); columns are: {', '.join(columns) or '(none)'}"
        )
    pairs = SentencePairs([], [], [])
    for number, record in enumerate(records, header_line + 1):
        pairs.first.append(str(record[sentences[0]]))
        pairs.second.append(str(record[sentences[1]]))
        pairs.scores.append(_score(str(record[score]), path, number) if score is not None else math.nan)
    return pairs


@dataclass(frozen=True)
class WicItems:
    words: list[tuple[list[str], list[str]]]
    positions: list[tuple[int, int]]
    labels: list[bool]


def read_wic(directory: str | Path) -> WicItems:
    """WiC distribution: ``*.data.txt`` (word, PoS, i1-i2, example 1, example 2) + ``*.gold.txt`` (T/F)."""
    directory = Path(directory)
    data_files = sorted(directory.glob("*.data.txt"))
    if not data_files:
        raise FileNotFoundError(f"no *.data.txt file in WiC directory {directory}")
    data = data_files[0]
    gold = data.with_name(data.name.replace(".data.txt", ".gold.txt"))
    if not gold.exists():
        raise FileNotFoundError(f"{gold} (the labels of {data.name}) does not exist")
    labels = given_file_text(gold, what="WiC labels").split()
    items = WicItems([], [], [])
    lines = given_file_text(data, what="WiC data").splitlines()
    if len(lines) != len(labels):
        raise ValueError(f"{data} has {len(lines)} items but {gold} has {len(labels)} labels")
    for number, (line, label) in enumerate(zip(lines, labels, strict=True), 1):
        fields = line.split("\t")
        if len(fields) != 5:
            raise ValueError(f"{data}, line {number}: {len(fields)} tab-separated fields, expected 5")
        try:
            first, second = (int(i) for i in fields[2].split("-"))
        except ValueError:
            raise ValueError(f"{data}, line {number}: indices {fields[2]!r} are not 'i1-i2'") from None
        if label not in ("T", "F"):
            raise ValueError(f"{gold}, line {number}: label {label!r} is not T or F")
        items.words.append((fields[3].split(" "), fields[4].split(" ")))
        items.positions.append((first, second))
        items.labels.append(label == "T")
    return items


def fitted_transforms(reference: Tensor) -> dict[str, Callable[[Tensor], Tensor]]:
    """The three modes as maps, their whitening and outlier dimensions fitted on ``reference``."""
    whiten = fit_whitening(reference)
    _, dims = clip_detected_outliers(reference)
    return {"raw": lambda v: v, "whitened": whiten, "clipped": lambda v: clip_outliers(v, dims)}


SCORED_SPLIT = "the scored split (both sides of every pair)"


def sts_scores(pairs: SentencePairs, encode: Callable[[list[str]], Tensor], *, picture: Path | None = None,
               fit: tuple[Tensor, str] | None = None) -> dict:  # fmt: skip
    """Spearman ρ × 100 between gold scores and cos(u, v) of the sentence vectors ``encode`` makes, per mode. The
    whitening and outlier dimensions are fitted on ``fit`` (vectors, what they are: BERT-whitening's release fits on
    train + dev + test, both sides of every pair, repeats counted; bojone/BERT-whitening eng/eval.py), else on the
    scored split's sentences, named in ``whitening_fitted_on``."""
    vectors = encode(pairs.first + pairs.second)
    count = len(pairs.first)
    reference, fitted_on = fit if fit is not None else (vectors, SCORED_SPLIT)
    result: dict = {"n": count, "whitening_fitted_on": fitted_on, "whitening_fit_sentences": len(reference)}
    for mode, apply in fitted_transforms(reference).items():
        vs = apply(vectors)
        cosine = torch.nn.functional.cosine_similarity(vs[:count].double(), vs[count:].double(), dim=-1)
        result[mode] = float(spearmanr(cosine.numpy(), np.array(pairs.scores)).statistic * 100)
        if mode == "raw":  # per pair, for a paired bootstrap between runs scored on these pairs (evaluation_noise.py)
            result["raw_items"] = {"kind": "spearman", "prediction": cosine.tolist(), "gold": list(pairs.scores),
                                   "ids": [item_id(i, f"{a}\t{b}") for i, (a, b) in
                                           enumerate(zip(pairs.first, pairs.second, strict=True))]}  # fmt: skip
    cosines = pair_cosines(vectors, pairs.scores)
    result["sentence_geometry"] = sentence_geometry(vectors, cosines)
    if picture is not None:  # Meng et al. 2021's figure: similar pairs should sit right of random ones
        from degen_train.metrics.plots import cosine_histogram

        cosine_histogram(
            {"similar (score >= 4)": cosines["similar"], "random": cosines["random"]},
            picture,
            xlabel="cosine of sentence vectors",
            title="similar vs random sentence pairs",
        )
        result["sentence_geometry"]["picture"] = str(picture)
    return result


# SimCSE's positive pairs for ℓ_align: STS-B pairs scored above 4 (Gao, Yao & Chen 2021, section 5: "pairs with
# scores higher than 4"), strictly: 208 of STS-B dev's 1,500, where >= 4 takes 264.
ALIGNED_ABOVE = 4.0


def pair_cosines(vectors: Tensor, scores: list[float], *, similar_at: float = 4.0, seed: int = 0) -> dict[str, Tensor]:
    """Raw cosines of the pairs scored >= ``similar_at`` and of as many random pairings of the same sentences
    (first of one pair with second of another): the two distributions of Meng et al. 2021's figure; and
    ``aligned``, the cosines of the pairs scored above ALIGNED_ABOVE (SimCSE's positives, for ℓ_align)."""
    count = len(scores)
    first, second = vectors[:count].double(), vectors[count:].double()
    similar = torch.tensor(scores) >= similar_at
    aligned = torch.tensor(scores) > ALIGNED_ABOVE
    generator = torch.Generator().manual_seed(seed)
    shuffled = torch.randperm(count, generator=generator)
    shuffled = torch.where(shuffled == torch.arange(count), (shuffled + 1) % count, shuffled)  # never a true pair
    return {
        "similar": torch.nn.functional.cosine_similarity(first[similar], second[similar], dim=-1),
        "aligned": torch.nn.functional.cosine_similarity(first[aligned], second[aligned], dim=-1),
        "random": torch.nn.functional.cosine_similarity(first, second[shuffled], dim=-1),
    }


def sentence_geometry(vectors: Tensor, cosines: dict[str, Tensor], *, similar_at: float = 4.0) -> dict:
    """Mean cosine of all sentence vectors, of the similar vs random pairs ``pair_cosines`` gave, and Wang & Isola's
    alignment (over the pairs scored above 4, SimCSE's positives) and uniformity (over every sentence), as SimCSE and
    COCO-LM report them."""
    aligned = cosines.get("aligned", cosines["similar"])
    return {
        "mean_cosine_all_sentences": mean_pairwise_cosine(vectors),
        "similar_pairs_mean_cosine": float(cosines["similar"].mean()) if len(cosines["similar"]) else None,
        "random_pairs_mean_cosine": float(cosines["random"].mean()),
        "similar_pairs": len(cosines["similar"]),
        "similar_at_score": similar_at,
        "aligned_above_score": ALIGNED_ABOVE,
        "aligned_pairs": len(aligned),
        "alignment": alignment_from_cosines(aligned) if len(aligned) else None,
        "uniformity": uniformity(vectors),
    }


def alignment(first: Tensor, second: Tensor, alpha: float = 2.0) -> float:
    """ℓ_align = E_(x,y)~positive pairs ‖f(x) − f(y)‖₂^α of L2-normalised vectors, α = 2 (Wang & Isola 2020, ICML;
    SimCSE and COCO-LM report it on STS-B pairs scored above 4). ``first``, ``second``: (N, H), row i a pair."""
    u = torch.nn.functional.normalize(first.double(), dim=-1)
    v = torch.nn.functional.normalize(second.double(), dim=-1)
    return float((u - v).norm(p=2, dim=1).pow(alpha).mean())


def alignment_from_cosines(cosine: Tensor) -> float:
    """ℓ_align with α = 2 from the pairs' cosines: ‖u − v‖² = 2 − 2·cos(u, v) for unit vectors."""
    return float((2 - 2 * cosine.double()).mean())


def uniformity(vectors: Tensor, t: float = 2.0) -> float:
    """ℓ_uniform = log E_x,y~data exp(−t‖f(x) − f(y)‖₂²) over every pair of distinct rows of L2-normalised vectors,
    t = 2 (Wang & Isola 2020, ICML). ``vectors``: (N, H)."""
    x = torch.nn.functional.normalize(vectors.double(), dim=-1)
    return float(torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log())


def best_threshold(cosine: Tensor, labels: Tensor) -> tuple[float, float]:
    """The threshold t of 'same sense iff cos > t' with the best accuracy, searched over every midpoint
    between consecutive sorted scores (and below the lowest), and that accuracy."""
    values = torch.unique(cosine.double())  # sorted
    candidates = torch.cat([values[:1] - 1, (values[1:] + values[:-1]) / 2])  # (K,)
    correct = ((cosine.double()[None, :] > candidates[:, None]) == labels[None, :]).double().mean(1)  # (K,)
    best = int(correct.argmax())
    return float(candidates[best]), float(correct[best])


def wic_scores(
    items: WicItems, vectors: tuple[Tensor, Tensor], fit: tuple[WicItems, tuple[Tensor, Tensor]] | None = None
) -> dict:
    """WiC accuracy of 'same sense iff cos(u, v) > t' per mode (Pilehvar & Camacho-Collados 2019; Luo et al. 2021).

    With ``fit`` (another split: its items and vectors), t and the modes' whitening and outlier dimensions are
    fitted there and the accuracy is on ``items``: ``accuracy``. Always reported as well, named for what it is:
    ``accuracy_threshold_fitted_on_scored_items``, the optimistic number of a threshold picked on the items scored.
    """
    first, second = _kept(items, vectors)
    labels = torch.tensor(items.labels)[_keep_mask(vectors)]
    result: dict = {"n": len(labels), "dropped": len(items.labels) - len(labels)}
    if fit is not None:
        fit_first, fit_second = _kept(*fit)
        fit_labels = torch.tensor(fit[0].labels)[_keep_mask(fit[1])]
        transforms = fitted_transforms(torch.cat([fit_first, fit_second]))
        result["fitted_on"] = {"n": len(fit_labels), "what": "threshold, whitening and outlier dims"}
    else:
        transforms = fitted_transforms(torch.cat([first, second]))
    for mode, apply in transforms.items():
        cosine = torch.nn.functional.cosine_similarity(apply(first).double(), apply(second).double(), dim=-1)
        threshold, accuracy = best_threshold(cosine, labels)
        entry = {"accuracy_threshold_fitted_on_scored_items": accuracy, "threshold_fitted_on_scored_items": threshold}
        if fit is not None:
            fit_cosine = torch.nn.functional.cosine_similarity(
                apply(fit_first).double(), apply(fit_second).double(), dim=-1
            )
            fitted, _ = best_threshold(fit_cosine, fit_labels)
            entry.update(accuracy=float(((cosine > fitted) == labels).double().mean()), threshold=fitted)
        if mode == "raw":  # per item, right or wrong, for a paired bootstrap (evaluation_noise.py)
            threshold = entry.get("threshold", entry["threshold_fitted_on_scored_items"])
            result["raw_items"] = {"kind": "accuracy", "correct": ((cosine > threshold) == labels).double().tolist(),
                                   "ids": _wic_ids(items, vectors)}
        result[mode] = entry
    return result


def _wic_ids(items: WicItems, vectors: tuple[Tensor, Tensor]) -> list[str]:
    """The scored items' ids (metrics/evaluation_noise.item_id): the row and a hash of both examples and positions."""
    keep = _keep_mask(vectors).tolist()
    return [item_id(i, f"{' '.join(a)}\t{' '.join(b)}\t{p}") for i, ((a, b), p, kept) in
            enumerate(zip(items.words, items.positions, keep, strict=True)) if kept]  # fmt: skip


def _keep_mask(vectors: tuple[Tensor, Tensor]) -> Tensor:
    first, second = vectors
    return ~(first.isnan().any(1) | second.isnan().any(1))  # items whose target word could not be found


def _kept(items: WicItems, vectors: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    keep = _keep_mask(vectors)
    return vectors[0][keep], vectors[1][keep]
