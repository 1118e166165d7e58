"""The parts of `make reproduce` for the methods beyond the seeds: each one's runs (plan_methods) and what its
page section claims (MethodPart); write.method_section writes the section. The reproduce modules import one way:
methods -> runs -> page -> claims (with verdicts) -> write.

Each decoder method is trained exactly as part (a)'s MLE baseline (recipe gao_cosreg with γ = 0, the same steps
and seeds) with its own term added (or, for AGG, its objective in place of MLE), so the baseline's runs are
shared. I-STAR has its own MLM baseline (its term logged with weight 0); SimCSE continues from part (c)'s teacher.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

GAO_BASELINE = ("recipe=gao_cosreg", "regularizer.cosreg.weight=0")
# SimCTG's Table 1 at CPU scale (part (f), generation): the decoder setting of docs/measuring.md that trains past pure
# repetition, 1,000 steps of 32 × 128 tokens of one part of the Wikipedia slice, its generations measured on another.
GENERATION_DECODINGS = ("greedy", "nucleus", "contrastive")
GENERATION_MEASURES = {"rep-2": "rep_2", "rep-3": "rep_3", "rep-4": "rep_4", "diversity": "diversity",
                       "MAUVE": "mauve", "coherence_simcse": "coherence_simcse", "coherence_opt": "coherence_opt",
                       "gen perplexity": "perplexity_under_model", "kept tokens": "mean_kept_tokens"}  # fmt: skip
SIMCTG_TABLE_CLAIMS = {"rep-2": "lower", "rep-3": "lower", "rep-4": "lower", "diversity": "higher", "MAUVE": "higher",
                       "coherence_simcse": "higher", "coherence_opt": "higher"}  # fmt: skip


def generation_overrides(cfg, seed: int) -> list[str]:  # noqa: ANN001 - DictConfig
    """The CPU decoder setting (docs/measuring.md), its generations by the released protocol (evaluation/generation)."""
    shared, steps = Path(str(cfg.shared_data)), int(cfg.steps.simctg_generation)
    every = max(1, steps // 5)
    return ["recipe=gpt2_mle", "data=text", f"data.path={shared / 'wikipedia-2015' / 'part-0000.txt'}",
            "data.document_unit=line", f"data.tokenizer.vocab_size={cfg.vocab_size}", f"trainer.max_steps={steps}",
            f"trainer.val_check_interval={every}", f"callbacks.checkpoint.every_n_train_steps={every}",
            f"callbacks.isotropy.every_n_steps={every}", "trainer.enable_progress_bar=false",
            "trainer.enable_model_summary=false", f"seed={seed}", "ckpt_path=auto",
            f"eval.generate={shared / 'wikipedia-2015' / 'part-0031.txt'}",
            f"eval.generate_prompts={cfg.generation_prompts}",
            f"eval.generate_decodings=[{','.join(GENERATION_DECODINGS)}]",
            *[str(o) for o in cfg.run_overrides]]  # fmt: skip

DECODER_METHODS = ("simctg", "unlikelihood", "agg", "spectrum_control")
ATTENTION_COLUMNS = ["val perplexity", "max kurtosis", "max ‖x‖∞", "outlier dims (Luo)", "attention sink %",
                     "W8A8 gap", "STS-B raw"]  # fmt: skip


@dataclass(frozen=True)
class MethodPart:
    title: str
    description: str
    baseline: tuple[str, str]  # (part, variant) whose rows the method is compared with
    overrides: tuple[str, ...]  # the method's run (the baseline's own, for decoders, come first)
    expectations: dict[str, str]  # column -> lower | higher | same: the paper's claim, checked
    columns: list[str] = field(default_factory=list)
    why: str = ""  # where a verdict may not show at this scale, and why
    # A control run of the method's own form with its term at weight 0 (variant "control"), and the claims the
    # method must show against it, so that a gain is the term's and not the reparameterisation's.
    control: tuple[str, ...] = ()
    control_expectations: dict[str, str] = field(default_factory=dict)
    note: str = ""  # said plainly on the page, under the table
    shown: tuple[str, ...] = ()  # more variants of the part in the table, without verdicts (a branches' parent)
    # Claims across columns: (base variant, its column, the method's column, expect), e.g. MLE's greedy rep-2 against
    # SimCTG's contrastive-search rep-2 (both arms of this part).
    compared: tuple[tuple[str, str, str, str], ...] = ()


METHOD_PARTS: dict[str, MethodPart] = {
    "simctg": MethodPart(
        "(f) Su et al. 2022 (SimCTG): discriminative token representations",
        "MLE + SimCTG's token contrast (ρ = 0.5) against MLE, otherwise as part (a).",
        ("gao", "mle"),
        ("regularizer=[cosreg,simctg]",),
        {"last-layer mean cos": "lower", "val perplexity": "not higher"},
        ["val perplexity", "last-layer mean cos", "last-layer self-similarity", "val simctg"],
        "SimCTG fine-tunes a pretrained GPT-2; here it trains a tiny decoder from scratch",
    ),
    "simctg_generation": MethodPart(
        "(f) Su et al. 2022 (SimCTG), Table 1 at CPU scale: SimCTG + contrastive search against MLE + greedy or "
        "nucleus",
        "MLE against MLE + SimCTG's token contrast (ρ = 0.5, weight 1) on the decoder setting that trains past pure "
        "repetition (docs/measuring.md: recipe gpt2_mle, 4 layers × 256, 1,000 steps of 32 × 128 tokens of "
        "wikipedia-2015/part-0000.txt), each run's generations measured by the released protocol (degen-eval "
        "--generate: 32-token prefixes drawn across part-0031.txt, up to 128 new tokens cut at the first end-of-text, "
        "greedy, nucleus p = 0.95 and contrastive search k = 8, α = 0.6). A claim on a generation measure compares "
        "SimCTG's contrastive search with MLE's greedy or nucleus decoding on the same prompts: its evaluation-set "
        "term is the paired bootstrap over prompts.",
        ("simctg_generation", "mle"),
        ("regularizer=simctg",),
        {"val perplexity": "not higher"},
        ["val perplexity", *(f"{d} {m}" for d in GENERATION_DECODINGS for m in ("rep-2", "rep-4", "diversity",
                                                                              "coherence_simcse", "MAUVE",
                                                                              "kept tokens"))],  # fmt: skip
        "SimCTG fine-tunes GPT-2 small on WikiText-103 for 40k steps at batch 128; this is a 4-layer decoder trained "
        "from scratch for 1,000 steps, its MAUVE below the 1,000 prompts a side its authors' tables use (null, with "
        "the reason), and coherence_opt needs OPT-2.7b on the machine",
        compared=tuple((base, f"{base_decoding} {measure}", f"contrastive {measure}", expect)
                       for base_decoding in ("greedy", "nucleus") for base in ("mle",)
                       for measure, expect in SIMCTG_TABLE_CLAIMS.items()),  # fmt: skip
    ),
    "unlikelihood": MethodPart(
        "(g) Welleck et al. 2020: unlikelihood training repeats less",
        "MLE + token-level unlikelihood (α = 1) against MLE; greedy continuations (100 tokens) of 50-token "
        "held-out prefixes.",
        ("gao", "mle"),
        ("regularizer=[cosreg,unlikelihood]",),
        {"seq-rep-4": "lower", "distinct-4": "higher", "val perplexity": "not higher"},
        ["val perplexity", "seq-rep-4", "rep/128", "distinct-4"],
        "the paper fine-tunes and measures a 16-layer model; a tiny model's continuations repeat heavily either way",
    ),
    "agg": MethodPart(
        "(h) Yu et al. 2022 (AGG): gating rare rows' gradient widens the cone",
        "The AGG objective (α = 0.03, counts over the last 1000 steps) against MLE.",
        ("gao", "mle"),
        ("objective=agg",),
        {"embedding mean cos": "lower", "IsoScore": "higher", "val perplexity": "not higher"},
        ["val perplexity", "embedding mean cos", "IsoScore", "rare-token mean cos"],
        "the paper trains on WikiText-103 for far longer; rare groups are defined over windows of thousands of steps",
    ),
    "spectrum_control": MethodPart(
        "(i) Wang et al. 2020 (spectrum control): a slow-decaying embedding spectrum",
        "MLE with the embedding as U·diag(σ)·Vᵀ, a polynomial singular-value profile (γ = 0.5) and orthogonality "
        "penalties, against MLE.",
        ("gao", "mle"),
        ("regularizer=[cosreg,spectrum_control]",),
        {"top-1 variance share": "lower", "IsoScore": "higher", "val perplexity": "not higher"},
        ["val perplexity", "embedding mean cos", "IsoScore", "top-1 variance share", "val spectrum_control"],
        "the paper's profile decay and weights are unreleased; ours are a first choice, not tuned",
        control=("regularizer=[cosreg,spectrum_control]", "regularizer.spectrum_control.weight=0"),
        control_expectations={"top-1 variance share": "lower", "IsoScore": "higher", "val perplexity": "not higher"},
        note="The control trains the same U·diag(σ)·Vᵀ factorisation with both penalties at weight 0 (logged, not "
        "optimised): a difference between mle and control is the reparameterisation's, between control and "
        "spectrum_control the penalties'.",
    ),
    "istar": MethodPart(
        "(j) Rudman & Eickhoff 2024 (I-STAR): decreasing isotropy",
        "MLM − λ·IsoScore* (λ = 1, direction decrease, ζ = 0.2) against MLM with the I-STAR term logged at weight 0.",
        ("istar", "mlm"),
        ("recipe=istar",),
        {"last-layer IsoScore": "lower", "val perplexity": "not higher"},
        ["val perplexity", "last-layer IsoScore", "last-layer mean cos", "STS-B raw"],
        "the paper fine-tunes pretrained encoders on tasks; here I-STAR shapes MLM pretraining",
        note="C0 is refreshed as released: from more than 250,000 eval-mode states of the upcoming training batches "
        "at the start of every epoch.",
    ),
    "simcse": MethodPart(
        "(k) Gao, Yao, Chen 2021 (SimCSE): sentence vectors that rank STS pairs",
        "Unsupervised SimCSE with the recipe's released settings (τ = 0.05, [CLS] + MLP pooler while training, "
        "batch 64 of one sentence of at most 32 tokens, lr 3e-5, no warm-up, no weight decay) continued from part "
        "(c)'s teacher, against the teacher itself. STS-B is probed with [CLS] vectors, as the authors evaluate, "
        "beside the mean-pooled vectors of the other parts.",
        ("tacl", "teacher"),
        ("recipe=simcse",),
        {"STS-B raw [CLS]": "higher", "STS-B raw": "higher", "sentence mean cos": "lower"},
        ["STS-B raw [CLS]", "STS-B raw", "STS-B whitened", "sentence mean cos", "train simcse"],
        "SimCSE trains BERT-base for 15,625 steps at batch 64; the teacher here is a 2-layer model",
        note="Unsupervised SimCSE presupposes a pretrained encoder whose features already carry meaning: two dropout "
        "views of a sentence are only a useful positive pair when the encoder's [CLS] already tells sentences "
        "apart. The tiny teacher here is not such an encoder. `train simcse` is the last training loss: chance for "
        "a batch of 64 is ln 64 = 4.16; a loss near it means the contrast was not learned.",
    ),
    # (l) Does the optimizer alone change the geometry? One part per pairing, each against its AdamW twin.
    "muon": MethodPart(
        "(l) Muon instead of AdamW, decoder: does the optimizer alone change the cone?",
        "Part (a)'s MLE decoder trained with optimizer=muon (torch's Muon on the blocks' matrices at the "
        "KellerJordan/Muon README's settings, AdamW on embeddings, output layer, norms and biases) against AdamW. "
        "Max kurtosis and max ‖x‖∞ are read where Bondarenko et al.'s released evaluation reads them (part (n)).",
        ("gao", "mle"),
        ("optimizer=muon",),
        {"max kurtosis": "lower", "embedding mean cos": "same", "IsoScore": "same", "val perplexity": "not higher"},
        ["val perplexity", "embedding mean cos", "IsoScore", "top-1 variance share", "outlier dims (Luo)",
         "max kurtosis", "max ‖x‖∞"],  # fmt: skip
        "Park et al. 2025 report kurtosis near 0 with Muon together with a single-scale RMSNorm and an embedding "
        "projection, on 1.4B-parameter models over 1T tokens; here Muon alone on a 2-layer decoder",
        note="The geometry rows test the null: 'same' holds when the optimizer alone leaves the cone as it was.",
    ),
    "muon_cosreg": MethodPart(
        "(l) Muon + CosReg, decoder: does the regulariser work the same under another optimizer?",
        "Part (a)'s CosReg decoder (γ = 1) trained with optimizer=muon against CosReg with AdamW.",
        ("gao", "cosreg"),
        ("optimizer=muon",),
        {"embedding mean cos": "same", "IsoScore": "same", "val perplexity": "not higher"},
        ["val perplexity", "embedding mean cos", "IsoScore", "top-1 variance share", "max kurtosis", "max ‖x‖∞"],
        "CosReg acts on the embedding rows, which stay on AdamW under Muon; only the blocks change optimizer",
    ),
    "muon_encoder": MethodPart(
        "(l) Muon instead of AdamW, encoder",
        "Part (j)'s MLM encoder (the I-STAR recipe, its term at weight 0) trained with optimizer=muon against AdamW.",
        ("istar", "mlm"),
        ("optimizer=muon",),
        {"max kurtosis": "lower", "embedding mean cos": "same", "last-layer mean cos": "same",
         "val perplexity": "not higher"},  # fmt: skip
        ["val perplexity", "embedding mean cos", "last-layer mean cos", "IsoScore", "outlier dims (Luo)",
         "max kurtosis", "max ‖x‖∞", "STS-B raw"],  # fmt: skip
        "as in the decoder row: Muon alone, at CPU scale",
    ),
    "cosreg_cooldown": MethodPart(
        "(l) Warm-up–stable–decay cooldowns branched from one stable run, with and without CosReg",
        "One MLE decoder trained with scheduler=wsd through its stable phase (the first three quarters of part (a)'s "
        "steps), then two cooldowns branched from its last stable checkpoint (branch_from=RUN@STEP, a 1 − √p decay "
        "over the last quarter, starting at the branch step): MLE alone, and MLE + CosReg (γ = 1) switched on for the "
        "cooldown only. The schedule is the released wsd_schedule's (epfml/schedules-and-scaling): the warm-up starts "
        "at lr/100 and the decay's length is rounded down. Measured at each branch's end; the stable run at its own.",
        ("cosreg_cooldown", "cooldown"),
        ("regularizer.cosreg.weight=1.0",),
        {"embedding mean cos": "lower", "IsoScore": "higher", "val perplexity": "not higher"},
        ["val perplexity", "embedding mean cos", "IsoScore", "top-1 variance share", "max kurtosis"],
        "a cooldown a quarter of a short run long is little time for a regulariser to reshape the embedding",
        shown=("stable",),
    ),
    # (n) Attention that can do nothing: the outliers, the attention sink and the W8A8 gap.
    "clipped_softmax": MethodPart(
        "(n) Bondarenko et al. 2023: clipped softmax removes the outliers",
        "An MLM encoder (recipe bert_mlm, eager attention) with clipped softmax (γ = −α/T with the released BERT "
        "script's α: γ = −0.025 at T = 128; ζ = 1) against plain softmax on the same path. Each number is the "
        "released evaluation's quantity (Qualcomm-AI-research/outlier-free-transformers, validate_mlm.py and "
        "validate_clm.py), on WikiText-2's validation text cut into its blocks (encoders: 128 tokens, 15% [MASK]ed; "
        "decoders: 512). Max kurtosis: encoders, of the FFN outputs and the residual LayerNorms' outputs; decoders, "
        "of each layer's output, fc2, out_proj, both norms and the final norm (the last layer before the final norm). "
        "Max ‖x‖∞: the same tensors, with the encoders' residual sums (the LayerNorms' inputs, where the outliers "
        "live). W8A8 gap: the perplexity quantized minus float (degen-eval --w8a8, placement=released: the MLM head "
        "and the logits stay in float, the residual sums are quantized; decoders take the released OPT settings); "
        "below 0 is noise. Attention sink %: the share of (window, layer, head) whose first-token attention exceeds "
        "ε = 0.3 on windows of exactly 64 tokens (Gu et al. 2024, sail-sg/Attention-Sink).",
        ("attention", "softmax"),
        ("model.attention_variant.name=clipped_softmax",),
        {"max kurtosis": "lower", "max ‖x‖∞": "lower", "W8A8 gap": "lower", "val perplexity": "not higher"},
        ATTENTION_COLUMNS,
        "the paper trains BERT-base for 1M steps, where a few hidden dimensions reach |x| ≈ 735; outliers grow with "
        "training, so softmax_long (seed 0, five times the steps) shows whether they start to appear at this size",
        shown=("softmax_long",),
    ),
    "gated_attention": MethodPart(
        "(n) Bondarenko et al. 2023: gated attention removes the outliers",
        "The same encoder with gated attention (per token and head, the released BERT script's MLP gate "
        "d → d/4 → 1) against plain softmax.",
        ("attention", "softmax"),
        ("model.attention_variant.name=gated",),
        {"max kurtosis": "lower", "max ‖x‖∞": "lower", "W8A8 gap": "lower", "val perplexity": "not higher"},
        ATTENTION_COLUMNS,
        "as for clipped softmax: at this size and length the plain encoder may have no outliers to remove",
    ),
    "output_gate": MethodPart(
        "(n) Qiu et al. 2025: the attention output gate removes the sink",
        "Part (a)'s MLE decoder with the elementwise output gate Y ⊙ σ(X·W_θ) against MLE.",
        ("gao", "mle"),
        ("model.attention_variant.name=output_gate",),
        {"attention sink %": "lower", "max ‖x‖∞": "lower", "W8A8 gap": "lower", "val perplexity": "not higher"},
        [*ATTENTION_COLUMNS[:3], "attention sink %", "W8A8 gap"],
        "the paper trains 1.7B-parameter models on 3.5T tokens; a 2-layer decoder may have no sink to remove",
    ),
    # (o) Luo et al. 2021's evidence is an ablation, not a correlate: pretraining without position embeddings.
    "positions": MethodPart(
        "(o) Luo et al. 2021: without position embeddings, the outlier dimensions are gone",
        "Part (n)'s plain MLM encoder (recipe bert_mlm, the same steps and seeds) pretrained with its learned "
        "absolute position table held at zero and frozen (model.position_embeddings=none), against the same encoder "
        "with positions. Outlier dims (Luo): the last layer's dimensions whose mean is beyond 3σ of the dimensions' "
        "means; position η² of outlier dims: the mean share of those dimensions' variance that the token's position "
        "explains (a one-way ANOVA's η², metrics/positional.py).",
        ("attention", "softmax"),
        ("model.position_embeddings=none",),
        {"outlier dims (Luo)": "lower", "max ‖x‖∞": "lower"},
        ["val perplexity", "outlier dims (Luo)", "position η² of outlier dims", "max ‖x‖∞", "max kurtosis"],
        "Luo et al. ablate BERT-base pretrained for 1M steps; a 2-layer encoder at CPU scale may not have grown "
        "positional outlier dimensions to lose",
        note="Without positions an MLM sees each sequence as a bag of tokens: its perplexity is expected to be "
        "higher, and is not judged.",
    ),
}
OPTIMIZER_PARTS = ("muon", "muon_cosreg", "muon_encoder", "cosreg_cooldown")
ATTENTION_PARTS = ("attention", "clipped_softmax", "gated_attention", "output_gate")  # their runs get W8A8


def plan_methods(cfg, add: Callable, teacher_folder) -> None:  # noqa: ANN001 - DictConfig, plan's add, Path
    """Add every method part asked for to the plan (``add`` as in runs.plan)."""
    parts, seeds = set(cfg.parts), range(int(cfg.seeds))
    for name in DECODER_METHODS:
        for seed in seeds if name in parts else ():
            add(name, name, seed, cfg.steps.gao, *GAO_BASELINE, f"model={cfg.decoder}", *METHOD_PARTS[name].overrides,
                encoder=False)  # fmt: skip
    for seed in seeds if "simctg_generation" in parts else ():
        for variant, extra in (("mle", ()), ("simctg_generation", METHOD_PARTS["simctg_generation"].overrides)):
            add("simctg_generation", variant, seed, int(cfg.steps.simctg_generation), *extra, encoder=False,
                shared=generation_overrides(cfg, seed))  # fmt: skip
    for seed in seeds if "istar" in parts else ():
        add("istar", "mlm", seed, cfg.steps.istar, "recipe=istar", f"model={cfg.encoder}", "regularizer.istar.weight=0",
            encoder=True)  # fmt: skip
        add("istar", "istar", seed, cfg.steps.istar, "recipe=istar", f"model={cfg.encoder}", encoder=True)
    for seed in seeds if "muon" in parts else ():
        add("muon", "muon", seed, cfg.steps.gao, *GAO_BASELINE, f"model={cfg.decoder}", "optimizer=muon",
            encoder=False)  # fmt: skip
    for seed in seeds if "muon_cosreg" in parts else ():
        add("muon_cosreg", "muon_cosreg", seed, cfg.steps.gao, "recipe=gao_cosreg", f"model={cfg.decoder}",
            "regularizer.cosreg.weight=1.0", "optimizer=muon", encoder=False)  # fmt: skip
    for seed in seeds if "muon_encoder" in parts else ():
        if "istar" not in parts:  # the AdamW twin: part (j)'s baseline
            add("istar", "mlm", seed, cfg.steps.istar, "recipe=istar", f"model={cfg.encoder}",
                "regularizer.istar.weight=0", encoder=True)  # fmt: skip
        add("muon_encoder", "muon_encoder", seed, cfg.steps.istar, "recipe=istar", f"model={cfg.encoder}",
            "regularizer.istar.weight=0", "optimizer=muon", encoder=True)  # fmt: skip
    for seed in seeds if "cosreg_cooldown" in parts else ():
        total = int(cfg.steps.gao)
        stable = max(1, total * 3 // 4)
        wsd = ("scheduler=wsd", f"scheduler.total_steps={total}", f"scheduler.decay_steps={total - stable}",
               f"scheduler.warmup_steps={max(1, stable // 10)}", f"model={cfg.decoder}")  # fmt: skip
        parent = add("cosreg_cooldown", "stable", seed, stable, *GAO_BASELINE, *wsd, encoder=False)
        for variant, gamma in (("cooldown", 0.0), ("cosreg_cooldown", 1.0)):
            add("cosreg_cooldown", variant, seed, total, *GAO_BASELINE, *wsd, f"branch_from={parent.folder}@{stable}",
                f"regularizer.cosreg.weight={gamma}", encoder=False)  # fmt: skip
    encoder = ("recipe=bert_mlm", f"model={cfg.encoder}", "model.attention=eager")  # clipped softmax's path for all
    for seed in seeds if parts & {"clipped_softmax", "gated_attention", "positions"} else ():
        add("attention", "softmax", seed, cfg.steps.attention, *encoder, encoder=True)
        if "positions" in parts:
            add("positions", "positions", seed, cfg.steps.attention, *encoder, *METHOD_PARTS["positions"].overrides,
                encoder=True)  # fmt: skip
        for name in ("clipped_softmax", "gated_attention"):
            if name in parts:
                add(name, name, seed, cfg.steps.attention, *encoder, *METHOD_PARTS[name].overrides, encoder=True)
    if "clipped_softmax" in parts:  # do outliers start to appear with more training? One seed, five times the steps
        add("clipped_softmax", "softmax_long", 0, 5 * int(cfg.steps.attention), *encoder, encoder=True)
    for seed in seeds if "output_gate" in parts else ():
        add("output_gate", "output_gate", seed, cfg.steps.gao, *GAO_BASELINE, f"model={cfg.decoder}",
            *METHOD_PARTS["output_gate"].overrides, encoder=False)  # fmt: skip
    for seed in seeds if "simcse" in parts else ():
        add("simcse", "simcse", seed, cfg.steps.simcse, "recipe=simcse", f"start={teacher_folder}", encoder=True,
            recipe_batches=True)  # fmt: skip
    for name, part in METHOD_PARTS.items():  # controls: the method's own form, its term at weight 0
        for seed in seeds if part.control and name in parts else ():
            add(name, "control", seed, cfg.steps.gao, *GAO_BASELINE, f"model={cfg.decoder}", *part.control,
                encoder=False)  # fmt: skip
