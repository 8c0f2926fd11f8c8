"""The SmolLM2 GGUF backbone loads with the right q/k row order: its perplexity on real text is low."""
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from icicle.backbone import SMOLLM2, _unpermute, gguf_meta_config, load_backbone
from icicle.tokenizer import gguf_path

TEXT = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named after "
        "the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889.")


def _nll(model, ids):
    n = ids.shape[1]
    with torch.no_grad():
        lg = model.train_logits(ids[:, :-1], torch.ones(1, n - 1, dtype=torch.bool), torch.zeros(n - 1, dtype=torch.long),
                                torch.arange(n - 1))
    return F.cross_entropy(lg, ids[0, 1:]).item()


def test_unpermute_inverts_llama_cpp_permutation():
    w = np.arange(12 * 3, dtype=np.float32).reshape(12, 3)
    n_head = 2
    permuted = w.reshape(n_head, 2, 12 // n_head // 2, 3).swapaxes(1, 2).reshape(w.shape)  # llama.cpp's direction
    assert np.array_equal(_unpermute(permuted, n_head), w)


@pytest.mark.slow
def test_full_backbone_predicts_real_text(tok):
    full = gguf_meta_config(gguf_path())
    assert (full.hidden, full.layers, full.heads, full.kv_heads, full.vocab_size) == (576, 30, 9, 3, 49153)
    m = load_backbone(replace(full, max_context_tokens=512), SMOLLM2)
    ids = torch.tensor([tok.encode(TEXT)])
    nll = _nll(m, ids)
    assert nll < 3.0, nll  # uniform over 49k tokens is 10.8; a wrong q/k order gives > 6


@pytest.mark.slow
def test_backbone_rejects_a_mismatched_config():
    full = gguf_meta_config(gguf_path())
    with pytest.raises(ValueError, match="hidden"):
        load_backbone(replace(full, hidden=64, layers=1), SMOLLM2, keep=[0])
    with pytest.raises(ValueError, match="keep lists"):
        load_backbone(replace(full, layers=2), SMOLLM2, keep=[0])
