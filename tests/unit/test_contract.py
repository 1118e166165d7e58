"""The term contract as written: discovery without edits, requires honoured, extras documented, weight-0
terms frozen, and the private Lightning internals the house leans on still where they were."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertForPreTraining

from degen_train.losses.catalog import build_terms, discover_terms
from degen_train.losses.contract import TERM_REGISTRY, LossTerm, TermContext, WeightedSum
from degen_train.models.backbone import Backbone
from degen_train.models.output import EXTRAS, OPTIONAL_FIELDS
from tests.helpers import masked_batch, tiny_backbone

PLUGIN = '''
import torch
from degen_train.losses.contract import LossTerm
from degen_train.losses.contract import TermOutput


class SquaredNorm(LossTerm):
    """L = mean_i ‖h_i‖² over the last layer: a plugin term for the discovery test."""

    def forward(self, output):
        return TermOutput(output.hidden_states.pow(2).sum(-1).mean())
'''


def test_a_term_from_an_installed_package_is_found_without_editing_degen_train(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One file + its entry point: the way a separate package adds a term (pyproject entry-points)."""
    (tmp_path / "my_degen_terms.py").write_text(textwrap.dedent(PLUGIN))
    info = tmp_path / "my_degen_terms-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-degen-terms\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[degen_train.terms]\nsquared_norm = my_degen_terms:SquaredNorm\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(TERM_REGISTRY, "squared_norm", raising=False)
    try:
        terms, weights = build_terms({"objective": {"mlm": {}}, "regularizer": {"squared_norm": {"weight": 0.5}}})
        assert type(terms["squared_norm"]).__name__ == "SquaredNorm" and weights["squared_norm"] == 0.5
        backbone = tiny_backbone()
        loss = WeightedSum(terms, weights)
        total, logged = loss(backbone(masked_batch(), requires=loss.requires))
        assert logged["squared_norm/loss"] > 0
        assert torch.isclose(total, logged["mlm/loss"] + 0.5 * logged["squared_norm/loss"])
    finally:
        TERM_REGISTRY.pop("squared_norm", None)
        sys.modules.pop("my_degen_terms", None)


def test_a_broken_plugin_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "broken_terms-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-terms\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[degen_train.terms]\nbroken = no_such_module_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match=r"loss-term plugin broken = 'no_such_module_here' failed to import"):
        discover_terms()


def test_every_term_file_is_found_by_what_it_declares_and_the_yaml_holds_every_option() -> None:
    """Issue 70.4: no list names the term files. Every file of the folder that declares ``@register_term`` is found
    (losses/declarations.py, from its text), and what the declaration says without importing the file (name,
    section, options, family, data format, whether it can mix samples) is what the imported class says. Each
    option of each term is a key of its yaml under SECTION.NAME: the reader of handed-over files allows a term's
    options from conf/ alone."""
    from degen_train.config.house_keys import house_keys
    from degen_train.losses.catalog import signature_options, term_options
    from degen_train.losses.declarations import declared_terms

    package = Path(__file__).parents[2] / "degen_train" / "losses"
    registering = {p.stem for p in package.glob("*.py") if "\n@register_term(" in p.read_text()}
    declared = declared_terms()
    assert {d.module.rsplit(".", 1)[1] for d in declared.values()} == registering
    catalog = (package / "catalog.py").read_text()
    assert "catalog" not in registering and "from degen_train.losses import (" not in catalog
    builtin = {name: term for name, term in discover_terms().items() if term.__module__.startswith("degen_train.")}
    assert set(builtin) == set(declared)
    assert {"mlm", "nsp", "mle", "electra", "coco_clm", "cosreg", "tacl", "coco_scl"} <= set(builtin)
    for name, term in builtin.items():
        found = declared[name]
        assert (found.section, found.family, found.data_format) == (term.section, term.family, term.data_format)
        own = signature_options(term)  # the constructor's keywords; None where it passes **options to its base
        assert found.option_names()[: len(own or [])] == (own or []) and found.accepts_any is False, name
        assert found.averages_over == tuple(term.averages_over), name
        assert term.section in ("objective", "regularizer"), name
        missing = [o for o in term_options(term) or () if o != "term" and f"{term.section}.{name}.{o}" not in
                   house_keys()]  # fmt: skip
        assert not missing, (name, missing)


def nsp_backbone() -> Backbone:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    return Backbone(BertForPreTraining(config))


@pytest.mark.parametrize("name", sorted(discover_terms()))
def test_every_terms_docstring_is_its_manual(name: str) -> None:
    """Issue 70.4: a term's class docstring is its manual, as sentence-transformers' loss files are: the formula
    (the first paragraph, docs/losses.md's table), ``Source:`` the paper and the released file (or that none was
    released), ``Needs:`` what it needs of the model and the data (the family its file declares), ``Example:`` a
    command that composes, with the term in it."""
    import re
    import shlex

    from degen_train.config import load_config

    term = discover_terms()[name]
    manual = {line.split(":", 1)[0]: line.split(":", 1)[1] for line in _paragraphs_of(term.__doc__ or "")
              if re.match(r"^(Source|Needs|Example):", line)}  # fmt: skip
    assert sorted(manual) == ["Example", "Needs", "Source"], f"{name}: the manual's lines are {sorted(manual)}"
    assert re.search(r"\b(19|20)\d\d\b", manual["Source"]) and re.search(r"released|no released", manual["Source"])
    family = getattr(term, "family", None)
    assert family is None or family in manual["Needs"], f"{name} is declared for {family}: {manual['Needs']}"
    example = re.search(r"``(degen-train [^`]+)``", manual["Example"])
    assert example, f"{name}: Example: names no ``degen-train ...`` command: {manual['Example']}"
    command = shlex.split(example.group(1))
    assert command[0] == "degen-train", command
    cfg = load_config(command[1:])
    composed = {key: (options or {}).get("term", key) for section in ("objective", "regularizer")
                for key, options in (cfg.get(section) or {}).items()}  # fmt: skip
    assert name in composed.values(), f"{manual['Example']} trains {sorted(composed.values())}, not {name}"


def _paragraphs_of(docstring: str) -> list[str]:
    """The docstring's logical lines: a line and the indented ones that continue it, joined."""
    import inspect

    lines: list[str] = []
    for line in inspect.cleandoc(docstring).splitlines():
        if lines and line and not line.startswith(("Source:", "Needs:", "Example:")) and lines[-1].startswith(
                ("Source:", "Needs:", "Example:")):  # fmt: skip
            lines[-1] += " " + line
        else:
            lines.append(line)
    return lines


def test_optional_fields_are_computed_only_when_a_term_asks() -> None:
    backbone = nsp_backbone()
    batch = masked_batch()
    plain = backbone(batch)
    assert plain.sequence_logits is None and plain.pooled is None and plain.all_hidden_states is None
    assert plain.logits is None and plain.labelled_hidden.shape == (3, 16)  # 3 labelled positions
    asked = backbone(batch, requires=frozenset(OPTIONAL_FIELDS))
    assert asked.sequence_logits.shape == (2, 2) and asked.pooled.shape == (2, 16)
    assert len(asked.all_hidden_states) == 2  # embeddings + 1 layer


def test_a_term_requiring_an_unknown_field_is_refused() -> None:
    class Wanting(LossTerm):
        requires = frozenset({"teacher_hidden_states"})

    with pytest.raises(ValueError, match=r"requires \['teacher_hidden_states'\].*optional fields: all_hidden_states"):
        WeightedSum({"wanting": Wanting()}, {"wanting": 1.0})


def test_every_extras_key_a_recipe_writes_is_documented() -> None:
    sections = {
        "electra": {"objective": {"electra": {}}},
        "coco": {"objective": {"coco_clm": {}}, "regularizer": {"coco_scl": {}}},
    }
    for name, section in sections.items():
        terms, weights = build_terms(section)
        backbone = tiny_backbone()
        for term in terms.values():
            term.setup(TermContext(hidden_size=16, vocab_size=30, batch_size=2, backbone=backbone))
        loss = WeightedSum(terms, weights)
        batch = {**masked_batch(), "sample_seed": torch.tensor([1, 2])}
        output = backbone(loss.prepare_batch(batch), requires=loss.requires)
        assert set(output.extras) <= set(EXTRAS), (name, set(output.extras) - set(EXTRAS))


def test_weight_zero_terms_freeze_what_only_they_use() -> None:
    """Their own heads (coco_scl's projection) and backbone heads no weighted term reads (NSP): no gradient
    would reach them, so they are frozen and left out of the optimizer."""
    backbone = nsp_backbone()
    terms, weights = build_terms(
        {"objective": {"mlm": {}, "nsp": {"weight": 0}}, "regularizer": {"coco_scl": {"weight": 0}}}
    )
    for term in terms.values():
        term.setup(TermContext(hidden_size=16, vocab_size=30, batch_size=2, backbone=backbone))
    frozen = WeightedSum(terms, weights).freeze_unweighted(backbone)
    assert not any(p.requires_grad for p in terms["coco_scl"].parameters())
    assert not any(p.requires_grad for p in backbone.nsp_head.parameters())
    assert not any(p.requires_grad for p in backbone.model.bert.pooler.parameters())
    assert backbone.model.get_input_embeddings().weight.requires_grad  # the shared body still trains
    assert any("seq_relationship" in name for name in frozen)


def test_a_weighted_term_keeps_its_heads() -> None:
    backbone = nsp_backbone()
    terms, weights = build_terms({"objective": {"mlm": {}, "nsp": {"weight": 1}}})
    assert WeightedSum(terms, weights).freeze_unweighted(backbone) == []
    assert all(p.requires_grad for p in backbone.parameters())


def test_the_lightning_internals_we_use_are_still_there(tmp_path: Path) -> None:
    """The private Lightning pieces the house leans on (README: Where the house departs); when Lightning moves one,
    this fails first, by name."""
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter
    from lightning.pytorch.strategies import ModelParallelStrategy

    # parallel.py: FSDP2 through ModelParallelStrategy with no tensor parallelism sets these two sizes itself (the
    # strategy has no public setter) and reads whether the checkpoint is sharded from the third.
    strategy = ModelParallelStrategy(save_distributed_checkpoint=False)
    for name in ("_data_parallel_size", "_tensor_parallel_size", "_save_distributed_checkpoint"):
        assert hasattr(strategy, name), name
    assert strategy._save_distributed_checkpoint is False
    # muon.py: the float32 Newton–Schulz path scales its rate with torch's own rule, a private function.
    from torch.optim._muon import _adjust_lr

    assert callable(_adjust_lr)
    # loggers.py: the resumable CSV logger reads metrics.csv through the logger's filesystem and keeps its writer.
    csv_logger = CSVLogger(save_dir=str(tmp_path / "plain"))
    assert hasattr(csv_logger, "_fs") and hasattr(csv_logger, "_experiment")

    from degen_train.run.loggers import ResumableCSVLogger

    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    # pretrain.py stamps the final validation with the step count through this counter.
    assert isinstance(trainer.fit_loop.epoch_loop._batches_that_stepped, int)
    # loggers.py keeps a resumed metrics.csv by overriding this hook, which ExperimentWriter calls on creation.
    assert callable(ExperimentWriter._check_log_dir_exists)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.csv").write_text("step,train/loss\n0,1.0\n")
    logger = ResumableCSVLogger(save_dir=str(tmp_path), name="logs", version="")
    assert logger.experiment.metrics_keys == ["step", "train/loss"]
    assert (tmp_path / "logs" / "metrics.csv").read_text().startswith("step,train/loss\n0,1.0")


def test_the_transformers_internals_we_use_are_still_there() -> None:
    """models/attention_variants.py reads which attention a config runs from ``config._attn_implementation`` (no
    public getter) and registers its functions and masks under names of its own (README: Where the house departs)."""
    from transformers import BertConfig
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    import degen_train.models  # noqa: F401 - registers degen_eager and degen_sdpa

    assert BertConfig(attn_implementation="eager")._attn_implementation == "eager"
    for name in ("degen_eager", "degen_sdpa"):
        assert name in ALL_ATTENTION_FUNCTIONS.valid_keys() and name in ALL_MASK_ATTENTION_FUNCTIONS.valid_keys()


def test_weight_zero_mlm_freezes_the_vocabulary_transform_but_not_the_words() -> None:
    """SimCSE logs MLM at weight 0: the transform and bias get no gradient, the tied word matrix does."""
    backbone = tiny_backbone()
    terms, weights = build_terms({"objective": {"mlm": {"weight": 0}}, "regularizer": {"simcse": {}}})
    frozen = WeightedSum(terms, weights).freeze_unweighted(backbone)
    assert not any(p.requires_grad for p in backbone.vocab_head.transform.parameters())
    assert backbone.model.get_input_embeddings().weight.requires_grad
    assert any("transform" in name for name in frozen)


def test_weight_zero_cosreg_never_freezes_the_tied_word_matrix() -> None:
    backbone = tiny_backbone()
    terms, weights = build_terms({"objective": {"mlm": {}}, "regularizer": {"cosreg": {"weight": 0}}})
    assert WeightedSum(terms, weights).freeze_unweighted(backbone) == []
