"""MAUVE and coherence of generated continuations, as the releases compute them, each under a named model.

- MAUVE (Pillutla et al. 2021) as SimCTG's "Contrastive Search Is What You Need" release computes it
  (open_ended_generation/english/utlis/compute_mauve.py): each reference/continuation pair cut to the shorter one's
  token count (GPT-2's tokenizer there), empty continuations dropped, ``mauve.compute_mauve(p_text=references,
  q_text=continuations, max_text_length=200)`` on GPT-2 large's features, ×100. With another featurizer the same
  procedure runs on that model (its tokenizer cuts the pairs, its last token's last hidden state is the feature, as
  mauve-text's own text path takes it) and the score says so: not comparable with SimCTG's tables.
- coherence_opt (Su & Collier 2022, compute_coherence.py): the continuation's mean log-probability under a causal LM
  (OPT in the paper) given [BOS] + the prefix, averaged over the prompts whose continuation has a word.
- coherence_simcse (Su et al. 2022, SimCTG §5.1): the cosine of the prefix's and the continuation's sentence vectors
  under a sentence encoder, SimCSE's released supervised encoder by default as the contrastive-decoding evaluation
  scripts load it (``SimCSE("princeton-nlp/sup-simcse-bert-base-uncased").similarity``: its pooler output, the
  similarity matrix's trace / n); another encoder is mean-pooled (all-MiniLM-L6-v2's own pooling) and named.

Each evaluator is a named model: a local folder, or a hub name found in the local cache (downloaded when online).
Where none is present, the measure is null with that reason, never a number from another model under its name.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

RELEASED_FEATURIZER = "gpt2-large"  # compute_mauve.py's (mauve-text's default)
MAX_TEXT_LENGTH = 200  # compute_mauve.py's max_text_length
# MAUVE compares two distributions: its authors use 5,000 texts a side and advise a few thousand (mauve-text's README,
# "Best practices": fewer is biased upward and varies more); SimCTG's tables use 1,000. Below that: not reported.
MAUVE_FEWEST = 1000
RELEASED_COHERENCE_MODEL = "facebook/opt-2.7b"  # the paper's coherence table (its release scores 125m to 13b)
RELEASED_SIMCSE = "princeton-nlp/sup-simcse-bert-base-uncased"  # the SimCSE coherence scripts' default
MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.model"]  # what a download brings: no pickled weights


def present(name: str | Path) -> tuple[str | None, str]:
    """(the local folder of a model, "") or (None, why it is not here): a folder, or a hub name in the local cache
    (downloaded when online; offline with HF_HUB_OFFLINE=1 only the cache is looked at)."""
    folder = Path(name).expanduser()
    if folder.is_dir():
        return (str(folder), "") if (folder / "config.json").is_file() else (None, f"{folder} has no config.json")
    from huggingface_hub import constants, snapshot_download

    try:
        path = snapshot_download(str(name), allow_patterns=MODEL_FILES, local_files_only=constants.HF_HUB_OFFLINE)
    except Exception as error:  # noqa: BLE001 - any failure to find it is the reason the measure is left out
        offline = " (offline: HF_HUB_OFFLINE=1)" if constants.HF_HUB_OFFLINE else ""
        return None, f"{name} is not on this machine{offline}: {type(error).__name__}"
    if not list(Path(path).glob("*.safetensors")):
        return None, f"{name} has no safetensors weights here (a pickled checkpoint is never loaded)"
    return path, ""


def cut_pair(reference: str, continuation: str, tokenizer: Any) -> tuple[str, str]:
    """Both texts cut to the shorter one's token count, as compute_mauve.py's ``parse_text`` does (tokenize, keep the
    first min_len tokens, decode)."""
    first, second = tokenizer.tokenize(reference), tokenizer.tokenize(continuation)
    keep = min(len(first), len(second))
    return (tokenizer.decode(tokenizer.convert_tokens_to_ids(first[:keep])),
            tokenizer.decode(tokenizer.convert_tokens_to_ids(second[:keep])))  # fmt: skip


def mauve_pairs(references: Sequence[str], continuations: Sequence[str], tokenizer: Any) -> tuple[list[str], list[str]]:
    """The pairs compute_mauve.py scores: each cut to the shorter, those whose continuation is empty dropped."""
    kept_references, kept_continuations = [], []
    for reference, continuation in zip(references, continuations, strict=True):
        reference, continuation = cut_pair(reference, continuation, tokenizer)
        if continuation.strip():
            kept_references.append(reference)
            kept_continuations.append(continuation)
    return kept_references, kept_continuations


def mauve_as_released(references: Sequence[str], continuations: Sequence[str], *, featurizer: str,
                      folder: str | None = None, fewest: int = MAUVE_FEWEST,
                      batch_size: int = 16) -> dict[str, Any]:  # fmt: skip
    """{"mauve": ×100 or None, "why": the reason it is None or not comparable, "pairs": scored, "featurizer": its
    name, "comparable": whether it stands beside SimCTG's tables}; ``folder``: where the featurizer's files are
    (default: ``featurizer`` itself)."""
    from transformers import AutoModel, AutoTokenizer

    from degen_train.core.handed_files import no_remote_code

    folder = folder or featurizer
    tokenizer = AutoTokenizer.from_pretrained(folder, **no_remote_code(folder))
    refs, preds = mauve_pairs(references, continuations, tokenizer)
    comparable = featurizer == RELEASED_FEATURIZER
    named = {"featurizer": featurizer, "pairs": len(preds), "max_text_length": MAX_TEXT_LENGTH,
             "comparable": comparable}  # fmt: skip
    if len(preds) < fewest:
        return {**named, "mauve": None, "why": f"{len(preds)} pairs with a continuation: MAUVE's authors advise a "
                f"few thousand a side and SimCTG's tables use {MAUVE_FEWEST:,}; below {fewest:,} it is not reported"}
    import mauve
    from mauve.utils import featurize_tokens_from_model

    # mauve-text's own text path (compute_mauve(p_text, q_text)) is this: each text tokenized, cut to
    # max_text_length tokens, its last token's last hidden state the feature; here with the model's files named.
    model = AutoModel.from_pretrained(folder, use_safetensors=True, **no_remote_code(folder)).eval()
    features = []
    for texts in (refs, preds):
        tokens = [tokenizer.encode(t, return_tensors="pt", truncation=True, max_length=MAX_TEXT_LENGTH) for t in texts]
        with torch.no_grad(), warnings.catch_warnings():
            # the release (mauve/utils.py) passes the model its KV cache by the name transformers now deprecates
            warnings.filterwarnings("ignore", message="`past_key_values` is deprecated", category=FutureWarning)
            features.append(featurize_tokens_from_model(model, tokens, batch_size).numpy())
    out = mauve.compute_mauve(p_features=features[0], q_features=features[1], device_id=-1, verbose=False)
    why = "" if comparable else f"featurized by {featurizer}, not GPT-2 large: not comparable with SimCTG's tables"
    return {**named, "mauve": 100 * float(out.mauve), **({"why": why} if why else {})}


def coherence_opt(prefixes: Sequence[str], continuations: Sequence[str], *, model: Any, tokenizer: Any) -> float | None:
    """coherence = mean over prompts (a continuation with a word) of the mean log p(continuation token | [BOS] +
    prefix + the tokens before it) under a causal LM; Su & Collier 2022, compute_coherence.py (OPT)."""
    scores = coherence_opt_scores(prefixes, continuations, model=model, tokenizer=tokenizer)
    scores = [s for s in scores if s is not None]
    return float(np.mean(scores)) if scores else None


@torch.no_grad()
def coherence_opt_scores(prefixes: Sequence[str], continuations: Sequence[str], *, model: Any,
                         tokenizer: Any) -> list[float | None]:  # fmt: skip
    """Each prompt's coherence_opt term (None where the release skips it: a continuation without a word)."""
    scores: list[float | None] = []
    for prefix, continuation in zip(prefixes, continuations, strict=True):
        if not continuation.strip().split():  # the release skips a continuation without a word
            scores.append(None)
            continue
        context = [tokenizer.bos_token_id, *tokenizer.convert_tokens_to_ids(tokenizer.tokenize(prefix))]
        predicted = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(continuation))
        ids = torch.tensor([context + predicted])
        probabilities = model(input_ids=ids).logits.float().softmax(dim=-1)[0, :-1][-len(predicted) :]  # (N, V)
        chosen = probabilities.gather(1, torch.tensor(predicted).unsqueeze(1)).squeeze(1)
        scores.append(float(np.mean(np.log(chosen.numpy()))))
    return scores


def coherence_simcse(prefix_vectors: torch.Tensor, continuation_vectors: torch.Tensor) -> float:
    """coherence = mean over prompts of cos(e(prefix), e(continuation)) under a sentence encoder e; Su et al. 2022
    (SimCTG), §5.1, with SimCSE as e (the scripts: the similarity matrix's trace / n)."""
    return float(torch.nn.functional.cosine_similarity(prefix_vectors, continuation_vectors, dim=-1).mean())


def simcse_pooling(folder: str | Path) -> str:
    """How ``simcse_vectors`` pools ``folder``'s states, in words: the evaluator a coherence column names."""
    name = str(folder).lower()
    if "simcse" in name:
        return "[CLS] state (SimCSE's tool, unsupervised)" if "unsup" in name else "pooler output (SimCSE's tool)"
    return "mean over tokens (a stand-in: not SimCSE's encoder, not comparable with its tables)"


@torch.no_grad()
def simcse_vectors(folder: str, texts: Sequence[str], *, batch_size: int = 32) -> torch.Tensor:
    """(N, H) sentence vectors as SimCSE's released tool makes them (simcse/tool.py ``encode``: at most 128 tokens;
    a supervised model's pooler output, an "unsup" one's [CLS] state); any other encoder mean-pooled over its
    tokens, as sentence-transformers pools all-MiniLM-L6-v2."""
    from transformers import AutoModel, AutoTokenizer

    from degen_train.core.handed_files import no_remote_code

    tokenizer = AutoTokenizer.from_pretrained(folder, **no_remote_code(folder))
    model = AutoModel.from_pretrained(folder, use_safetensors=True, **no_remote_code(folder)).eval()
    simcse = "simcse" in str(folder).lower()
    vectors = []
    for first in range(0, len(texts), batch_size):
        inputs = tokenizer(list(texts[first : first + batch_size]), padding=True, truncation=True, max_length=128,
                           return_tensors="pt")  # fmt: skip
        out = model(**inputs, return_dict=True)
        if simcse and "unsup" not in str(folder).lower() and getattr(out, "pooler_output", None) is not None:
            vectors.append(out.pooler_output)
        elif simcse:
            vectors.append(out.last_hidden_state[:, 0])
        else:
            mask = inputs["attention_mask"].unsqueeze(-1).to(out.last_hidden_state.dtype)
            vectors.append((out.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1e-9))
    return torch.cat(vectors).float()
