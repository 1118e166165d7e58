"""Load a tokenizer, or train one on the corpus and cache it by a hash of corpus + settings.

Encoders get a lower-cased WordPiece (BERT's recipe), decoders a byte-level BPE (GPT-2's); both are
wrapped as ``PreTrainedTokenizerFast`` subclasses so the export loads with ``AutoTokenizer``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, BertTokenizerFast, GPT2TokenizerFast, PreTrainedTokenizerFast

from degen_train.core.handed_files import HandedOverFileError, no_remote_code
from degen_train.core.io import CACHE_ELSEWHERE, atomic_directory, cache_key, resolve_pretrained
from degen_train.data.cache_lock import building

log = logging.getLogger(__name__)

ENCODER_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
END_OF_TEXT = "<|endoftext|>"
# 2: WordPiece trained without tokenizers' hash-map order (train_wordpiece); older caches are not reused.
TRAINING_VERSION = 2


TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def load_tokenizer(source: str | Path) -> PreTrainedTokenizerFast:
    """``AutoTokenizer.from_pretrained(source)`` for a folder (or a hub name), with a file that is not a tokenizer's
    named: a tokenizer.json of random bytes, a vocab.txt that is not UTF-8, a file cut short."""
    from degen_train.core.io import utf8_text

    folder = Path(str(source)).expanduser()
    if folder.is_dir():
        for name in (*TOKENIZER_JSON, "vocab.txt", "merges.txt"):
            path = folder / name
            if not path.is_file():
                continue
            text = utf8_text(path, what="tokenizer file")
            if name.endswith(".json"):
                try:
                    json.loads(text)
                except ValueError as error:
                    raise ValueError(f"{path} is not JSON ({error}): not a tokenizer's file, or one cut short; copy "
                                     f"the tokenizer folder again from its source") from None  # fmt: skip
    try:
        # a folder whose tokenizer_config.json names its own code is refused (HandedOverFileError, passed on)
        return AutoTokenizer.from_pretrained(str(source), **no_remote_code(source))
    except HandedOverFileError:
        raise
    except Exception as error:  # noqa: BLE001 - transformers and the Rust library raise many kinds: one line here
        first = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise ValueError(f"{source}: its tokenizer could not be loaded ({first}); give a folder holding a "
                         f"tokenizer.json (a run keeps one in RUN/tokenizer/)") from None  # fmt: skip


# A vocabulary is large for its corpus when most of its entries occur fewer than SEEN times in the training text and
# the text holds fewer than TOKENS_PER_ENTRY tokens per entry (WikiText-2 with 30,522 entries: 76; the builtin corpus
# with its 4,272: 22; a 2 MB corpus with 30,522: about 13, where a tiny model's loss barely moves from ln V).
SEEN, TOKENS_PER_ENTRY = 10, 20


def vocabulary_too_large(train: Any, tokenizer: Any, *, asked: int) -> str | None:
    """A caution naming a tokenizer too large for the text it was trained on, with a size that fits it (its entries
    seen at least SEEN times, to a multiple of 64), or None."""
    import numpy as np
    import pyarrow.compute

    ids = pyarrow.compute.list_flatten(train.with_format("arrow")["input_ids"]).to_numpy()
    counts = np.bincount(ids, minlength=len(tokenizer))
    rare = int((counts < SEEN).sum())
    if len(ids) >= TOKENS_PER_ENTRY * len(tokenizer) or rare <= len(tokenizer) // 2:
        return None
    fits = max(64, int((counts >= SEEN).sum()) // 64 * 64)
    return (
        f"data.tokenizer.vocab_size={asked} is large for this corpus: of the tokenizer's {len(tokenizer):,} entries, "
        f"{rare:,} ({rare / len(tokenizer):.0%}) occur fewer than {SEEN} times in its {len(ids):,} training tokens, so "
        f"their embedding rows and output logits barely train (the loss starts near ln {len(tokenizer):,} = "
        f"{np.log(len(tokenizer)):.1f}). A vocabulary of about {fits:,} fits it: data.tokenizer.vocab_size={fits}"
    )


def get_tokenizer(
    cfg: Any, *, family: str, corpus: Any, corpus_identity: str, cache_dir: Path
) -> PreTrainedTokenizerFast:
    """The tokenizer named by ``cfg.path``, else one trained on ``corpus`` (cached)."""
    if cfg.path:
        return load_tokenizer(resolve_pretrained(cfg.path))
    settings = [corpus_identity, family, cfg.vocab_size, cfg.min_frequency, cfg.lowercase, cfg.max_documents]
    settings.append(TRAINING_VERSION)
    key = cache_key(*settings)
    target = cache_dir / "tokenizers" / key
    if (target / "tokenizer.json").exists():
        log.info("tokenizer cache hit: %s", target)
        return load_tokenizer(target)
    with building(target):  # runs started together train it once
        if not (target / "tokenizer.json").exists():
            log.info("training a %s tokenizer (vocab %d) into %s", family, cfg.vocab_size, target)
            texts = _texts(corpus, cfg.max_documents)
            tokenizer = train_wordpiece(texts, cfg) if family == "encoder" else train_byte_bpe(texts, cfg)
            with atomic_directory(target, when_full=CACHE_ELSEWHERE) as staging:
                tokenizer.save_pretrained(str(staging))
        else:
            log.info("tokenizer cache hit (trained by another process while this one waited): %s", target)
    return load_tokenizer(target)


def train_wordpiece(texts: Iterator[str], cfg: Any) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece tokenizer with [CLS] A [SEP] (B [SEP]) templates, the same on every machine.

    tokenizers' WordPieceTrainer numbers the continuing pieces (##x) in the order of a hash map of words, and
    its merges break count ties by those numbers, so two trainings on the same corpus disagree (upstream issue
    huggingface/tokenizers#1794). The same algorithm without that order: each word's non-initial characters are
    written as private-use stand-ins (so "##x" is a character of its own), a plain BPE trainer — whose alphabet
    is sorted and whose merges are then a function of the counts alone — learns the pieces, and the stand-ins
    are read back as "##x".
    """
    normalizer = normalizers.BertNormalizer(lowercase=bool(cfg.lowercase))
    splitter = pre_tokenizers.BertPreTokenizer()
    stand_ins = ContinuationMarks()
    marked = (" ".join(stand_ins.mark(word) for word, _ in splitter.pre_tokenize_str(normalizer.normalize_str(text)))
              for text in texts)  # fmt: skip
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=int(cfg.vocab_size), min_frequency=int(cfg.min_frequency), special_tokens=ENCODER_SPECIALS
    )
    bpe.train_from_iterator(marked, trainer=trainer)
    vocab = {stand_ins.unmark(piece): index for piece, index in bpe.get_vocab().items()}
    # tokenizers' trainer also keeps every character's word-initial form; a character met only inside words has
    # just its stand-in here: add its plain form (after the trained ids, in code-point order) so it is no [UNK].
    for char in sorted(c for c in stand_ins.forward if c not in vocab):
        vocab[char] = len(vocab)
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    tok.add_special_tokens(ENCODER_SPECIALS)
    tok.normalizer = normalizer
    tok.pre_tokenizer = splitter
    tok.decoder = decoders.WordPiece()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return BertTokenizerFast(tokenizer_object=tok, do_lower_case=bool(cfg.lowercase), model_max_length=512)


class ContinuationMarks:
    """Non-initial characters of a word <-> private-use stand-ins (planes 15 and 16), numbered as first met.

    The corpus is read in a fixed order, so the numbering is too. A private-use character in the corpus itself
    would collide with a stand-in: it is read as U+FFFD while training (it then encodes as [UNK]).
    """

    FIRST, LAST = 0xF0000, 0x10FFFD
    NON_CHARACTERS = (0xFFFFE, 0xFFFFF, 0x10FFFE, 0x10FFFF)

    def __init__(self) -> None:
        self.forward: dict[str, str] = {}
        self.back: dict[str, str] = {}
        self.next_code = self.FIRST
        self.words: dict[str, str] = {}  # a word is marked once: most of a corpus's words are repeats

    def mark(self, word: str) -> str:
        marked = self.words.get(word)
        if marked is None:
            clean = "".join("\ufffd" if ord(c) >= self.FIRST else c for c in word)
            marked = self.words[word] = clean[:1] + "".join(self.forward.get(c) or self._new(c) for c in clean[1:])
        return marked

    def _new(self, char: str) -> str:
        while self.next_code in self.NON_CHARACTERS:
            self.next_code += 1
        if self.next_code > self.LAST:
            raise ValueError("the corpus has more distinct characters than the private-use planes can stand in for")
        stand_in, self.next_code = chr(self.next_code), self.next_code + 1
        self.forward[char], self.back[stand_in] = stand_in, char
        return stand_in

    def unmark(self, piece: str) -> str:
        """A trained piece as WordPiece writes it: "##" + its text when it starts inside a word."""
        if piece[:1] in self.back:
            return "##" + "".join(self.back.get(c, c) for c in piece)
        return "".join(self.back.get(c, c) for c in piece)


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


# A run of non-space characters longer than this is cut into pieces of this length before tokenizer training:
# the trainers' time grows with the square of a word's length (a 10 MB line without spaces ran for more than
# 15 minutes), and WordPiece encodes any word over 100 characters as [UNK] anyway.
LONGEST_TRAINING_WORD = 1000
_LONG_RUN = re.compile(rf"\S{{{LONGEST_TRAINING_WORD + 1},}}")


def _texts(corpus: Any, limit: int | None) -> Iterator[str]:
    cut = 0
    for index, row in enumerate(corpus):
        if limit is not None and index >= limit:
            break
        text, pieces = _LONG_RUN.subn(_in_pieces, row["text"])
        cut += pieces
        yield text
    if cut:
        log.warning(
            "tokenizer training: %d run(s) of more than %d characters without a space were cut into pieces of %d "
            "(they would only slow training down; the corpus itself is unchanged)",
            cut,
            LONGEST_TRAINING_WORD,
            LONGEST_TRAINING_WORD,
        )


def _in_pieces(match: re.Match) -> str:
    run = match.group(0)
    return " ".join(run[i : i + LONGEST_TRAINING_WORD] for i in range(0, len(run), LONGEST_TRAINING_WORD))
