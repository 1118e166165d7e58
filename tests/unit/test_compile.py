"""model.compile: blocks compiled in place, equal to eager, and no recompilation as the labelled count changes."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from degen_train.config import load_config
from degen_train.data.tokenizer import train_wordpiece
from degen_train.losses.catalog import build_terms
from degen_train.losses.contract import WeightedSum
from degen_train.models.backbone import Backbone, build_hf_model
from degen_train.models.compile import check_compile_available, compile_blocks
from tests.helpers import run


@pytest.fixture
def traced_without_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test whose subject is what dynamo traces and guards (which blocks compile, their graphs, recompiles,
    names, equality with eager), not inductor's kernels: blocks compile with aot_eager (forward and backward traced
    as inductor receives them, no C++ built: 35 s of a cold cache here for the first test alone; 27 s for the
    whole-run test). Inductor itself runs in tests/unit/test_compiled_head.py."""
    compile_module = torch.nn.Module.compile

    def traced(self: torch.nn.Module, *args: object, **kwargs: object) -> None:
        compile_module(self, *args, **{**kwargs, "backend": "aot_eager"})

    monkeypatch.setattr(torch.nn.Module, "compile", traced)


@pytest.mark.usefixtures("traced_without_kernels")
def test_blocks_compile_in_place_equal_to_eager_without_recompiling_per_batch() -> None:
    from torch._dynamo.utils import counters

    cfg = load_config(["model=tiny", "model.dropout=0", "model.attention_dropout=0"])
    tokenizer = train_wordpiece(iter(["the cat sat on the mat and the dog sat on the log"] * 20), cfg.data.tokenizer)
    torch.manual_seed(0)
    eager = build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False)
    compiled = copy.deepcopy(eager)
    assert compile_blocks(compiled) == ["bert.embeddings", "bert.encoder.layer.0", "bert.encoder.layer.1"]
    assert list(compiled.state_dict()) == list(eager.state_dict())  # names as in eager: checkpoints unchanged
    terms, weights = build_terms({"objective": cfg.objective})
    loss = WeightedSum(terms, weights)
    torch._dynamo.reset()
    counters.clear()
    generator = torch.Generator().manual_seed(0)
    for length, labelled in ((32, 5), (32, 9), (48, 3), (40, 11), (48, 7), (24, 2)):  # N (and T) change
        ids = torch.randint(5, len(tokenizer), (4, length), generator=generator)
        labels = torch.full_like(ids, -100)
        labels[:, :labelled] = ids[:, :labelled]
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
        results = []
        for model in (eager, compiled):
            model.zero_grad()
            total, _ = loss(Backbone(model)(batch, requires=loss.requires))
            total.backward()
            results.append((total.detach(), model.bert.encoder.layer[0].output.dense.weight.grad.clone()))
        torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-3, atol=1e-5)
    # One graph for the first length, one more when T first changes (then T is dynamic); N never reaches it.
    assert counters["stats"]["unique_graphs"] <= 2 * 2, dict(counters["stats"])  # forward graphs (+ backward)
    assert sum(counters["recompiles"].values()) <= 1, dict(counters["recompiles"])


def test_compile_without_a_cpp_compiler_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ValueError, match=r"model.compile=true on the CPU needs a C\+\+ compiler .* g\+\+"):
        check_compile_available("cpu")


def test_parallelize_compiles_before_sharding_and_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """parallel.parallelize: compile, then FSDP2 on frozen models, then the blocks and the root; a second call (the
    final validation's configure_model) applies nothing again."""
    from torch import nn

    from degen_train.run import parallel

    calls: list[str] = []
    monkeypatch.setattr(parallel, "compile_blocks", lambda model: calls.append("compile") or ["block"])
    monkeypatch.setattr(parallel, "apply_fsdp2", lambda module, *a, frozen=False, **k: calls.append(
        "shard frozen" if frozen else "shard root") or [])  # fmt: skip
    root, model, teacher = nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2)
    for _ in range(2):
        parallel.parallelize(root, model, [("tacl", teacher)], compile_model=True, fsdp_options={}, mesh=None,
                             device=torch.device("cpu"))  # fmt: skip
    assert calls == ["compile", "shard frozen", "shard root"]


@pytest.mark.usefixtures("traced_without_kernels")
def test_the_isotropy_probe_runs_compiled_blocks_eagerly_without_compiling_again() -> None:
    """The monitor's probe (eval mode, a hook per block) on compiled blocks: the states equal an eager twin's and no
    graph is compiled for it. Traced, its hooks recompiled each block (the recompile limit hit on an H200)."""
    from torch._dynamo.utils import counters

    from degen_train.callbacks.isotropy_monitor import probe_states

    cfg = load_config(["model=tiny"])
    tokenizer = train_wordpiece(iter(["the cat sat on the mat and the dog sat on the log"] * 20), cfg.data.tokenizer)
    torch.manual_seed(0)
    eager = Backbone(build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False))
    compiled = copy.deepcopy(eager)
    compile_blocks(compiled.model)
    ids = torch.randint(5, len(tokenizer), (2, 16), generator=torch.Generator().manual_seed(0))
    probe = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    torch._dynamo.reset()
    counters.clear()
    compiled.train()
    compiled.encode(probe)  # the training graphs
    graphs = counters["stats"]["unique_graphs"]
    assert graphs > 0
    layers, blocks = probe_states(compiled, probe)
    assert compiled.training  # the training mode comes back
    assert counters["stats"]["unique_graphs"] == graphs and not counters["recompiles"], dict(counters["recompiles"])
    eager_layers, eager_blocks = probe_states(eager, probe)
    for ours, theirs in zip([*layers, *blocks], [*eager_layers, *eager_blocks], strict=True):
        torch.testing.assert_close(ours, theirs)


@pytest.mark.usefixtures("traced_without_kernels")
def test_a_run_with_model_compile_compiles_its_blocks(tmp_path: Path) -> None:
    """model.compile=true in a whole run: dynamo traces the blocks. Throughput counts FLOPs over the first step under
    a dispatch mode; a compiled block first called under it was skipped by dynamo for good, so no frame was ever
    compiled (the H200 sitting: 351k tok/s eager, 356k "compiled" on BERT-base). That step now runs eagerly."""
    from torch._dynamo.eval_frame import _stance
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    summary = run(tmp_path / "run", "recipe=bert_mlm", "model=tiny", "model.compile=true", "trainer.max_steps=3",
                  "callbacks.throughput.count_total_flops=true")
    assert summary["final_step"] == 3
    # Without the eager counted step dynamo still reports its frames "ok" (skipped), but compiles no graph.
    assert counters["stats"]["unique_graphs"] >= 1, (dict(counters["stats"]), dict(counters["frames"]))
    assert summary["total_flops_over_model_flops"] > 0.5  # the eager first step was still counted
    assert _stance.stance == "default"  # the counted step's eager stance does not outlive it


@pytest.mark.usefixtures("traced_without_kernels")
@pytest.mark.parametrize("preset", ["gpt2_tiny", "llama_tiny"])
def test_decoder_blocks_compile_once_without_a_kv_cache(preset: str) -> None:
    """A decoder's training forward builds no KV cache: HF's GPT-2 and Llama make one whenever config.use_cache is
    on, and under model.compile each block's cache layer was a new guard, a recompile per block (the recompile
    limit hit on GPT-2 small in the H200 sitting's hand loop: 193k tok/s blocks-compiled, 345k whole)."""
    from torch._dynamo.utils import counters

    cfg = load_config([f"model={preset}", "recipe=gpt2_mle"])
    tokenizer = train_wordpiece(iter(["the cat sat on the mat and the dog sat on the log"] * 20), cfg.data.tokenizer)
    backbone = Backbone(build_hf_model(cfg.model, tokenizer=tokenizer, with_nsp_head=False))
    assert backbone.model.config.use_cache  # the exported config keeps generation's cache
    compile_blocks(backbone.model)
    torch._dynamo.reset()
    counters.clear()
    backbone.train()
    ids = torch.randint(5, len(tokenizer), (2, 16), generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        output = backbone.encode({"input_ids": ids, "attention_mask": torch.ones_like(ids), "padded": False})
        assert getattr(output, "past_key_values", None) is None
    assert counters["stats"]["unique_graphs"] >= 1 and not counters["recompiles"], dict(counters["recompiles"])


@pytest.mark.usefixtures("traced_without_kernels")
@pytest.mark.parametrize("recipe", ["tacl", "coco_lm"])
def test_a_teacher_and_a_generator_are_compiled_and_train_as_eager(
    recipe: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 55.7: the TaCL teacher and the ELECTRA/COCO-LM generator stayed eager under model.compile (TaCL took
    2.15x the plain step's time for 1.32x its FLOPs). Their blocks are compiled as the backbone's are, and two
    updates end in the eager run's weights."""
    from degen_train.run import parallel

    compiled: list[list[str]] = []
    real = parallel.compile_blocks
    monkeypatch.setattr(parallel, "compile_blocks", lambda model: compiled.append(real(model)) or compiled[-1])
    extra = [f"teacher={request.getfixturevalue('teacher')}"] if recipe == "tacl" else []
    settings = [f"recipe={recipe}", "model=tiny", "trainer.max_steps=2", "model.dropout=0",
                "model.attention_dropout=0", *extra]  # fmt: skip
    run(tmp_path / "eager", *settings)
    assert compiled == []
    torch._dynamo.reset()
    run(tmp_path / "compiled", *settings, "model.compile=true")
    assert len(compiled) == 2 and all(names for names in compiled)  # the backbone's blocks, then the other model's
    assert any(name.endswith("encoder.layer.0") for name in compiled[1]), compiled[1]
    weights = [torch.load(tmp_path / folder / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
               for folder in ("eager", "compiled")]  # fmt: skip
    for key, value in weights[0].items():
        torch.testing.assert_close(weights[1][key], value, atol=2e-5, rtol=1e-4, msg=key)
