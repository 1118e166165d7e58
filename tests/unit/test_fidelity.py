"""Each seed recipe as its authors released it: masking, generator shape and sampling, heads.

Sources, per test: ELECTRA = google-research/electra (pretrain/pretrain_helpers.py, configure_pretraining.py,
model/modeling.py); COCO-LM = microsoft/COCO-LM (fairseq/fairseq/models/cocolm/model.py and its base.yaml);
BERT/TaCL = Devlin et al. 2019 (80/10/10).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertForMaskedLM

from degen_train.config import load_config
from degen_train.data.collate import mask_tokens
from degen_train.losses.coco_clm import CorrectiveLMTerm
from degen_train.losses.coco_scl import SequenceContrastiveTerm
from degen_train.losses.contract import TermContext, WeightedSum
from degen_train.losses.electra import ElectraTerm
from degen_train.models.backbone import Backbone
from tests.helpers import masked_batch


def masking_shares(recipe: str) -> tuple[float, float, float]:
    """([MASK], random, kept) shares of the selected positions under a recipe's masking settings."""
    cfg = load_config([f"recipe={recipe}"] + (["teacher=x"] if recipe == "tacl" else []))
    ids = torch.randint(10, 1000, (40, 1_000))
    inputs, labels = mask_tokens(
        ids,
        torch.ones_like(ids, dtype=torch.bool),
        seeds=torch.arange(40),
        probability=float(cfg.masking.probability),
        mask_id=4,
        replacement_ids=torch.arange(10, 1000),
        mask_fraction=float(cfg.masking.mask_fraction),
        random_fraction=float(cfg.masking.random_fraction),
    )
    selected = labels != -100
    masked = (inputs[selected] == 4).float().mean().item()
    kept = (inputs[selected] == ids[selected]).float().mean().item()
    return masked, 1 - masked - kept, kept


@pytest.mark.parametrize(
    ("recipe", "expected"),
    [
        ("coco_lm", (1.0, 0.0, 0.0)),  # COCO-LM's task: every selected position becomes [MASK]
        ("electra", (0.85, 0.0, 0.15)),  # pretrain_helpers.mask: 85% [MASK], the rest kept, none random
        ("bert_mlm", (0.8, 0.1, 0.1)),  # Devlin et al. 2019
        ("tacl", (0.8, 0.1, 0.1)),  # TaCL keeps BERT's masking
    ],
)
def test_masking_per_recipe(recipe: str, expected: tuple[float, float, float]) -> None:
    shares = masking_shares(recipe)
    # 6,000 selected positions: a share's standard error is at most 0.65%; random hits on kept ids are ~0.1%.
    assert shares == pytest.approx(expected, abs=0.02), (recipe, shares)


def bert(layers: int, hidden: int, heads: int, dropout: float = 0.0) -> Backbone:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    return Backbone(BertForMaskedLM(config))


def context(backbone: Backbone) -> TermContext:
    config = backbone.model.config
    return TermContext(hidden_size=config.hidden_size, vocab_size=30, batch_size=2, backbone=backbone)


@pytest.mark.parametrize(
    ("layers", "hidden", "coco", "electra"),
    [
        (12, 256, (2, 1.0), (12, 1 / 4)),  # COCO-LM small: 2 generator layers; ELECTRA-Small: ¼ width
        (12, 768, (4, 1.0), (12, 1 / 3)),  # base: COCO-LM 4 layers; ELECTRA-Base: ⅓ width, full depth
        (24, 1024, (4, 1.0), (24, 1 / 4)),  # large: COCO-LM 4 layers (not 8); ELECTRA-Large: ¼ width
        (2, 128, (1, 1.0), (2, 1 / 4)),  # our tiny: at most half the main depth
    ],
)
def test_generator_shape_as_released(layers: int, hidden: int, coco: tuple, electra: tuple) -> None:
    assert CorrectiveLMTerm().released_generator_shape(layers, hidden) == coco
    assert ElectraTerm().released_generator_shape(layers, hidden) == pytest.approx(electra)


def test_electra_generator_is_narrow_full_depth_and_shares_embeddings_through_a_projection() -> None:
    backbone = bert(layers=3, hidden=64, heads=2)
    term = ElectraTerm()
    term.setup(context(backbone))
    generator = term.generator
    assert len(generator.encoder.encoder.layer) == 3 and generator.encoder.config.hidden_size == 16
    assert generator.encoder.embeddings.shared is backbone.model.bert.embeddings
    assert isinstance(generator.encoder.embeddings.projection, nn.Linear)  # 64 -> 16
    assert generator.decoder_weight is backbone.model.get_input_embeddings().weight
    assert generator.transform[0].out_features == 64  # the MLM head maps back to the embedding width
    logits = generator(masked_batch(), (masked_batch()["labels"].reshape(-1) != -100).nonzero().squeeze(1))
    assert logits.shape == (3, 30)


def test_heads_as_released() -> None:
    backbone = bert(layers=2, hidden=16, heads=2)
    electra = ElectraTerm()
    electra.setup(context(backbone))
    # ELECTRA's discriminator: dense(H) with the activation, then dense(1).
    assert [type(m) for m in electra.detection_head] == [nn.Linear, nn.GELU, nn.Linear]
    scl = SequenceContrastiveTerm()
    scl.setup(context(backbone))
    # COCO-LM's SCLHead: dense → activation → LayerNorm on [CLS].
    assert [type(m) for m in scl.projection] == [nn.Linear, nn.GELU, nn.LayerNorm]
    linear = ElectraTerm(detection_head="linear")  # the earlier heads stay reachable by their switch
    linear.setup(context(bert(layers=2, hidden=16, heads=2)))
    assert isinstance(linear.detection_head, nn.Linear) and linear.detection_head.out_features == 1


def test_coco_clm_head_is_a_bare_linear_over_the_tied_embeddings() -> None:
    """COCO-LM's CLMHead: F.linear(h, embed_tokens.weight, bias) at the masked positions, no transform."""
    backbone = bert(layers=2, hidden=16, heads=2)
    term = CorrectiveLMTerm()
    term.setup(context(backbone))
    with torch.no_grad():
        term.clm_bias.normal_()
    loss = WeightedSum({"coco_clm": term}, {"coco_clm": 1.0})
    output = backbone(loss.prepare_batch(masked_batch()), requires=loss.requires)
    assert output.logits is None or output.logits.shape[0] == 0  # the backbone's MLM head was not run
    logits, targets, index = term.clm_logits(output)
    selected = masked_batch()["labels"] != -100
    assert torch.equal(index, selected.reshape(-1).nonzero().squeeze(1))
    expected = F.linear(output.hidden_states[selected], backbone.model.get_input_embeddings().weight, term.clm_bias)
    assert torch.allclose(logits, expected) and torch.equal(targets, masked_batch()["labels"][selected])


def test_sample_mode_eval_samples_from_a_pass_without_dropout() -> None:
    """COCO-LM (generator_sample_mode: eval) samples from the generator in eval mode, without gradient;
    ELECTRA from the training pass's logits."""
    for mode in ("eval", "train"):
        backbone = bert(layers=2, hidden=16, heads=2, dropout=0.5)
        term = CorrectiveLMTerm(generator_sample_mode=mode)
        term.setup(context(backbone))
        term.train()
        batch = masked_batch()
        selected = batch["labels"] != -100
        torch.manual_seed(3)
        prepared = term.prepare_batch(batch)
        term.generator.eval()
        index = selected.reshape(-1).nonzero().squeeze(1)
        with torch.no_grad():
            without_dropout = term.generator(batch, index)
        from degen_train.models.generator import sample_replacements

        logits = without_dropout if mode == "eval" else prepared["generator_logits"].detach()
        expected = sample_replacements(logits, index, batch["sample_seed"], length=selected.shape[1])
        assert torch.equal(prepared["input_ids"][selected], expected), mode
    assert ElectraTerm().sample_mode == "train" and CorrectiveLMTerm().sample_mode == "eval"


def test_a_model_loaded_from_saved_weights_trains_with_dropout(tmp_path) -> None:  # noqa: ANN001
    """from_pretrained returns eval mode; the TaCL student and any continued pretraining must train in train mode."""
    from degen_train.config import load_config
    from degen_train.models.backbone import build_hf_model

    bert(layers=2, hidden=16, heads=2).model.save_pretrained(tmp_path / "saved")
    cfg = load_config([f"model.init_from={tmp_path / 'saved'}"])
    model = build_hf_model(cfg.model, tokenizer=range(30), with_nsp_head=False)
    assert all(module.training for module in model.modules())


def test_unlikelihood_recipe_uses_the_released_candidates() -> None:
    """facebookresearch/unlikelihood_training, custom/candidate_penalty_ce_loss.py: the earlier targets and the
    padding index (tests/unit/test_unlikelihood.py compares the computation with a transcription of it)."""
    cfg = load_config(["recipe=unlikelihood"])
    assert cfg.regularizer.unlikelihood.candidates == "released"


def test_simcse_recipe_as_released() -> None:
    """princeton-nlp/SimCSE run_unsup_example.sh: batch 64, max_seq_length 32, lr 3e-5, HF Trainer's default
    weight decay 0; evaluation with [CLS] vectors (pooler cls with --mlp_only_train)."""
    cfg = load_config(["recipe=simcse", "start=x"])
    assert (cfg.data.batch_size, cfg.data.block_size, cfg.optimizer.lr) == (64, 32, 3e-5)
    assert cfg.optimizer.weight_decay == 0.0 and cfg.eval.pooling == "cls"
    assert cfg.regularizer.simcse.pooler == "cls_mlp"
    assert (cfg.callbacks.best_by_sts.every_n_steps, cfg.callbacks.best_by_sts.pooling) == (125, "cls")
