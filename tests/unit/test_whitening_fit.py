"""Issue 64.4: STS whitening fitted as BERT-whitening's release fits it (bojone/BERT-whitening eng/eval.py with
normalized_by=target: compute_kernel_bias over the a- and b-vectors of every split given, repeats counted; then
transform_and_normalize and Spearman), transcribed below, against the default (the scored split itself)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch

from degen_train.metrics.probes import SCORED_SPLIT, SentencePairs, read_sts, sts_scores


def released_kernel_bias(vecs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """eng/utils.py compute_kernel_bias, transcribed: y = (x + bias)·kernel."""
    stacked = np.concatenate(vecs, axis=0)
    mu = stacked.mean(axis=0, keepdims=True)
    u, s, _ = np.linalg.svd(np.cov(stacked.T))
    return np.dot(u, np.diag(1 / np.sqrt(s))), -mu


def released_transform_and_normalize(vecs: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    vecs = (vecs + bias).dot(kernel)
    return vecs / np.clip((vecs**2).sum(axis=1, keepdims=True) ** 0.5, 1e-8, np.inf)


def _vectors(sentences: list[str], table: dict[str, np.ndarray]) -> torch.Tensor:
    return torch.tensor(np.stack([table[s] for s in sentences]))


def test_whitening_fitted_on_the_given_splits_equals_the_release() -> None:
    draw = np.random.default_rng(0)
    words = [f"s{i}" for i in range(60)]
    table = {w: draw.normal(size=4) * np.array([5.0, 1.0, 0.5, 0.2]) + 3.0 for w in words}
    scored = SentencePairs(words[:10], words[10:20], list(draw.uniform(0, 5, size=10)))
    train = SentencePairs(words[20:40], words[40:60], [float("nan")] * 20)  # labels are not needed to fit
    splits = [train, scored]  # train + the scored split, both sides of every pair, repeats counted
    fit_sentences = [s for pairs in splits for s in pairs.first + pairs.second]

    def encode(sentences: list[str]) -> torch.Tensor:
        return _vectors(sentences, table)

    ours = sts_scores(scored, encode, fit=(encode(fit_sentences), "train + scored"))
    kernel, bias = released_kernel_bias([encode(p.first).numpy() for p in splits] +
                                        [encode(p.second).numpy() for p in splits])  # fmt: skip
    a = released_transform_and_normalize(encode(scored.first).numpy(), kernel, bias)
    b = released_transform_and_normalize(encode(scored.second).numpy(), kernel, bias)
    expected = scipy.stats.spearmanr(scored.scores, (a * b).sum(axis=1)).correlation * 100
    assert ours["whitened"] == pytest.approx(expected, abs=1e-9)
    assert ours["whitening_fitted_on"] == "train + scored" and ours["whitening_fit_sentences"] == 60
    # the default fits on the scored split alone, and says so
    default = sts_scores(scored, encode)
    kernel, bias = released_kernel_bias([encode(scored.first).numpy(), encode(scored.second).numpy()])
    a = released_transform_and_normalize(encode(scored.first).numpy(), kernel, bias)
    b = released_transform_and_normalize(encode(scored.second).numpy(), kernel, bias)
    assert default["whitened"] == pytest.approx(scipy.stats.spearmanr(scored.scores, (a * b).sum(1)).correlation * 100)
    assert default["whitening_fitted_on"] == SCORED_SPLIT and default["whitened"] != ours["whitened"]


def test_glue_sts_b_files_read_whole_and_a_fit_split_needs_no_labels(tmp_path: Path) -> None:
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    rows = ['0\tmain-news\tx\t2012\t1\tnone\tnone\tHe said "no.\tShe said yes.\t1.5',
            '1\tmain-news\tx\t2012\t2\tnone\tnone\tA "quoted" word.\tA word."\t4.0']  # fmt: skip
    (tmp_path / "train.tsv").write_text(header + "\tscore\n" + "\n".join(rows) + "\n")
    pairs = read_sts(tmp_path / "train.tsv")  # a '"' in a tab-separated file is text (GLUE quotes nothing)
    assert pairs.first == ['He said "no.', 'A "quoted" word.'] and pairs.scores == [1.5, 4.0]
    (tmp_path / "test.tsv").write_text(header + "\n" + "\n".join(r.rsplit("\t", 1)[0] for r in rows) + "\n")
    with pytest.raises(ValueError, match=r"test.tsv: needs two sentence columns .* and a score column"):
        read_sts(tmp_path / "test.tsv")
    unscored = read_sts(tmp_path / "test.tsv", scored=False)
    assert unscored.second == ["She said yes.", 'A word."'] and all(np.isnan(unscored.scores))
