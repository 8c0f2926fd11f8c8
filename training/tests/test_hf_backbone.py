"""A local HF backbone directory loads into our Decoder with identical logits (random tiny Llama and Qwen3 made
with transformers, saved as safetensors: the same files a user's Qwen3-1.7B-Base directory holds)."""
import json
import os
import shutil

import pytest
import torch

from icicle.backbone import hf_dir_config, hf_dir_tokenizer, load_backbone
from icicle.tokenizer import COPY_TOKEN, Tok


def _save(tmp_path, kind, tokenizer_json, **over):
    import transformers

    common = dict(vocab_size=49160, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, rope_theta=50000.0, tie_word_embeddings=True,
                  max_position_embeddings=512)
    common.update(over)
    if kind == "qwen3":
        cfg, cls = transformers.Qwen3Config(**common), transformers.Qwen3ForCausalLM
    else:
        cfg, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    torch.manual_seed(0)
    hf = cls(cfg).eval()
    d = tmp_path / kind
    hf.save_pretrained(d, safe_serialization=True)
    shutil.copy(tokenizer_json, d / "tokenizer.json")
    return hf, str(d)


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_hf_dir_logits_match_transformers(tmp_path, fixture_dir, kind):
    hf, d = _save(tmp_path, kind, os.path.join(fixture_dir, "tokenizer.json"))
    cfg = hf_dir_config(d)
    assert cfg.qk_norm == (kind == "qwen3") and cfg.layers == 3 and cfg.head_dim == 16
    tok = Tok(hf_dir_tokenizer(d))
    m = load_backbone(cfg, d, copy_id=tok.copy_id).eval()
    ids = torch.randint(0, 49000, (1, 20))
    with torch.no_grad():
        want = hf(ids).logits[0]
        got = m.train_logits(ids, torch.ones_like(ids, dtype=torch.bool), torch.zeros(20, dtype=torch.long),
                             torch.arange(20))
    keep = torch.arange(want.shape[1]) != tok.copy_id  # the [COPY] row was re-initialised to the mean embedding
    assert torch.allclose(got[:, keep], want[:, keep], atol=1e-4), (got - want)[:, keep].abs().max()
    assert not torch.allclose(got[:, tok.copy_id], want[:, tok.copy_id])


def test_hf_dir_keeps_a_subset_of_blocks(tmp_path, fixture_dir):
    hf, d = _save(tmp_path, "llama", os.path.join(fixture_dir, "tokenizer.json"))
    from dataclasses import replace

    m = load_backbone(replace(hf_dir_config(d), layers=2), d, keep=[0, 2])
    assert torch.equal(m.layers[1].mlp.up_proj.weight, hf.model.layers[2].mlp.up_proj.weight)


def test_hf_dir_refusals_name_the_field(tmp_path, fixture_dir):
    _, d = _save(tmp_path, "llama", os.path.join(fixture_dir, "tokenizer.json"))
    c = json.load(open(os.path.join(d, "config.json")))
    json.dump({**c, "tie_word_embeddings": False}, open(os.path.join(d, "config.json"), "w"))
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        hf_dir_config(d)
    os.remove(os.path.join(d, "tokenizer.json"))
    with pytest.raises(ValueError, match="tokenizer.json"):
        hf_dir_tokenizer(d)


def test_full_config_needs_a_backbone_dir(monkeypatch):
    from icicle.configs import get_config

    monkeypatch.delenv("ICICLE_BACKBONE_DIR", raising=False)
    with pytest.raises(ValueError, match="ICICLE_BACKBONE_DIR"):
        get_config("full")
    assert COPY_TOKEN == "[COPY]"
