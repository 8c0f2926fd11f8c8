"""lab.attention: the four methods it times compute the same attention as a plain reference (softmax(q k^T /
sqrt(d) + mask) v, query head h reading key/value head h // 3), layer after layer, so their times compare methods."""
import numpy as np
import pytest

from icicle.lab.attention import HEAD_DIM, HEADS, KV_HEADS, Case, main


def reference(c: Case) -> np.ndarray:
    rep, x = HEADS // KV_HEADS, c.q[0]
    k_new = c.k[0].reshape(c.rows, KV_HEADS, HEAD_DIM)
    v_new = c.v[0].reshape(c.rows, KV_HEADS, HEAD_DIM)
    for l in range(c.layers):
        keys = np.concatenate([c.pk[l][0], k_new])  # [m, KV, D]
        values = np.concatenate([c.pv[l][0], v_new])
        q = x.reshape(c.rows, HEADS, HEAD_DIM)
        out = np.empty_like(q)
        for h in range(HEADS):
            s = q[:, h] @ keys[:, h // rep].T / np.sqrt(HEAD_DIM) + c.mask[0]
            w = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, h] = (w / w.sum(axis=-1, keepdims=True)) @ values[:, h // rep]
        x = out.reshape(c.rows, HEADS * HEAD_DIM)
    return x[None]


@pytest.mark.parametrize("mask", ["causal", "tree"])
def test_methods_compute_the_reference_attention(mask, vnni):
    c = Case(past=40, rows=5, layers=2, mask=mask, seed=1)
    want = reference(c)
    assert np.abs(c.step()() - want).max() < 1e-5
    assert np.abs(c.gqa(bias=True)() - want).max() < 1e-5
    assert np.abs(c.split()() - want).max() < 1e-5
    # int8 past: within its quantisation's error (about 1 % of the output's scale), not exact; on a CPU without
    # VNNI the u8 x s8 products run on kernels that can saturate: on session 22's AVX2 host 11.6 % of the
    # output's scale at worst and 2.0 % on average
    got = c.int8()()
    assert np.abs(got - want).max() < (0.05 if vnni else 0.2) * np.abs(want).max()
    assert np.abs(got - want).mean() < (0.02 if vnni else 0.05) * np.abs(want).mean()
    # without the bias only the causal mask is expressed: exact there, and not a copy tree's mask
    err = np.abs(c.gqa(bias=False)() - want).max()
    assert err < 1e-5 if mask == "causal" else err > 1e-3


def test_main_prints_each_method(capsys):
    main(["--past", "20", "--rows", "3", "--layers", "1", "--runs", "1"])
    out = capsys.readouterr().out
    assert "past 20, rows 3, 1 layers" in out
    for name in ("step graph (today)", "causal only", "tree's bias", "int8 past", "products' layouts"):
        assert name in out
