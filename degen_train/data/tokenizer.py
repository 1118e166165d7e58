"""Load a tokenizer, or train one on the corpus and cache it by a hash of corpus + settings.

Encoders get a lower-cased WordPiece (BERT's recipe), decoders a byte-level BPE (GPT-2's); both are
wrapped as ``PreTrainedTokenizerFast`` subclasses so the export loads with ``AutoTokenizer``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, BertTokenizerFast, GPT2TokenizerFast, PreTrainedTokenizerFast

from degen_train.io import atomic_directory, cache_key, resolve_pretrained

log = logging.getLogger(__name__)

ENCODER_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
END_OF_TEXT = "<|endoftext|>"


def get_tokenizer(
    cfg: Any, *, family: str, corpus: Any, corpus_identity: str, cache_dir: Path
) -> PreTrainedTokenizerFast:
    """The tokenizer named by ``cfg.path``, else one trained on ``corpus`` (cached)."""
    if cfg.get("path"):
        return AutoTokenizer.from_pretrained(resolve_pretrained(cfg.path))
    settings = [corpus_identity, family, cfg.vocab_size, cfg.min_frequency, cfg.lowercase, cfg.max_documents]
    key = cache_key(*settings)
    target = cache_dir / "tokenizers" / key
    if (target / "tokenizer.json").exists():
        log.info("tokenizer cache hit: %s", target)
        return AutoTokenizer.from_pretrained(str(target))
    log.info("training a %s tokenizer (vocab %d) into %s", family, cfg.vocab_size, target)
    texts = _texts(corpus, cfg.max_documents)
    tokenizer = train_wordpiece(texts, cfg) if family == "encoder" else train_byte_bpe(texts, cfg)
    with atomic_directory(target) as staging:
        tokenizer.save_pretrained(str(staging))
    return AutoTokenizer.from_pretrained(str(target))


def train_wordpiece(texts: Iterator[str], cfg: Any) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece tokenizer with [CLS] A [SEP] (B [SEP]) templates."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=bool(cfg.lowercase))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=int(cfg.vocab_size), min_frequency=int(cfg.min_frequency), special_tokens=ENCODER_SPECIALS
    )
    tok.train_from_iterator(texts, trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return BertTokenizerFast(tokenizer_object=tok, do_lower_case=bool(cfg.lowercase), model_max_length=512)


def train_byte_bpe(texts: Iterator[str], cfg: Any) -> PreTrainedTokenizerFast:
    """A GPT-2-style byte-level BPE with <|endoftext|> as bos, eos and padding."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=int(cfg.vocab_size),
        min_frequency=int(cfg.min_frequency),
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    wrapped = GPT2TokenizerFast(tokenizer_object=tok, model_max_length=1024)
    wrapped.bos_token = wrapped.eos_token = wrapped.unk_token = wrapped.pad_token = END_OF_TEXT
    return wrapped


def tokenizer_identity(tokenizer: PreTrainedTokenizerFast) -> str:
    """A hash of the tokenizer's full definition (vocabulary, merges, normalisation)."""
    return cache_key(tokenizer.backend_tokenizer.to_str())


def _texts(corpus: Any, limit: int | None) -> Iterator[str]:
    for index, row in enumerate(corpus):
        if limit is not None and index >= limit:
            return
        yield row["text"]
