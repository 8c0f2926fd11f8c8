"""ONNX export parity on a small random decoder: prefill with past = 0, chunk after cache, tree step, int8."""
import os

import numpy as np
import pytest
import torch

from icicle.decode import CachedPromptScorer, Trie, causal_mask_np, decode, ort_step, torch_step
from icicle.export import FP32_ATOL, check_parity, export_onnx, io_names, ort_session, quantize_int8
from icicle.model import Decoder, ModelConfig

SMALL = ModelConfig(vocab_size=300, hidden=32, layers=2, heads=4, kv_heads=2, head_dim=8, intermediate=64)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    m = Decoder(SMALL).eval()
    d = tmp_path_factory.mktemp("onnx")
    fp, q = str(d / "model.onnx"), str(d / "model.int8.onnx")
    export_onnx(m, fp)
    quantize_int8(fp, q)
    return m, fp, q


def test_io_names_follow_contract(exported):
    _, fp, _ = exported
    s = ort_session(fp)
    ins, outs = io_names(SMALL.layers)
    assert [i.name for i in s.get_inputs()] == ins
    assert [o.name for o in s.get_outputs()] == outs
    assert ins[4:6] == ["past_key_values.0.key", "past_key_values.0.value"] and outs[1] == "present.0.key"


def test_parity_fp32_tree_and_int8(exported):
    m, fp, q = exported
    rep = check_parity(m, fp, q, trials=3)
    assert rep.fp32_max_abs <= FP32_ATOL and rep.tree_max_abs <= FP32_ATOL
    assert rep.int8_top1_agreement >= 0.5


def test_logits_only_at_index_and_presents_new_only(exported):
    m, fp, _ = exported
    step = ort_step(ort_session(fp), SMALL.layers)
    past = [np.zeros((1, 4, 2, 8), np.float32)] * 4
    from icicle.decode import causal_mask_np

    logits, pres = step(np.array([[1, 2, 3]]), np.array([[4, 5, 6]]), causal_mask_np(4, 3), np.array([0, 2]), past)
    assert logits.shape == (1, 2, SMALL.vocab_size)
    assert all(p.shape == (1, 3, 2, 8) for p in pres)


def test_decode_agrees_torch_vs_onnx(exported):
    m, fp, _ = exported
    rng = np.random.default_rng(1)
    g, ctx = Trie(), Trie()
    for i in range(15):
        g.add(list(rng.integers(2, 50, size=rng.integers(1, 4))) + [0], f"g{i}")
    for i in range(4):
        ctx.add(list(rng.integers(2, 50, size=rng.integers(1, 4))) + [0], f"c{i}")
    prompt = list(rng.integers(0, 299, size=20))
    empty = [np.zeros((1, 0, 2, 8), np.float32)] * 4
    a = decode(CachedPromptScorer(torch_step(m), prompt, empty), g, ctx, 299, 0, 4)
    b = decode(CachedPromptScorer(ort_step(ort_session(fp), 2), prompt, empty), g, ctx, 299, 0, 4)
    assert [x.docid for x in a.beams] == [x.docid for x in b.beams]
    assert [x.score for x in a.beams] == pytest.approx([x.score for x in b.beams], abs=1e-4)
    assert a.p_copy == pytest.approx(b.p_copy, abs=1e-5)


def test_manifest_int8_only_names_the_int8_file_as_onnx(tmp_path):
    from icicle.export import write_manifest
    from icicle.model import Decoder, ModelConfig
    from icicle.prompt import TEMPLATE

    m = Decoder(ModelConfig(hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=64))
    kw = dict(name="n", config="c", backbone="b", model_version="v", data_version="d", model=m, copy_token_id=1,
              end_token_id=0, template=TEMPLATE)
    both = write_manifest(str(tmp_path), **kw)
    assert (both["onnx"], both["onnx_quantized"], both["int8_weight_bits"]) == ("model.onnx", "model.int8.onnx", 7)
    only = write_manifest(str(tmp_path), **kw, int8_only=True)
    assert only["onnx"] == "model.int8.onnx" and "onnx_quantized" not in only and "int8_weight_bits" not in only
    assert "prompt_format" not in only  # format 1 is the absent field, as in every older manifest
    assert write_manifest(str(tmp_path), **kw, prompt_format=2)["prompt_format"] == 2


def test_int8_file_keeps_down_proj_in_fp32(exported, tmp_path):
    import json
    import shutil

    import onnx
    from onnx import numpy_helper

    from icicle.export import add_int8

    m, fp, _ = exported
    shutil.copy(fp, tmp_path / "model.onnx")
    (tmp_path / "manifest.json").write_text(json.dumps({"name": "fixture", "onnx": "model.onnx"}))
    out = add_int8(str(tmp_path))
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"name": "fixture", "onnx": "model.onnx",
                                                                    "onnx_quantized": "model.int8.onnx",
                                                                    "int8_weight_bits": 7}
    g = onnx.load(str(tmp_path / "model.int8.onnx")).graph
    # 7-bit weights: u8 x s8 pairs summed into 16 bits cannot saturate (255 x 64 x 2 < 32767) on CPUs without VNNI
    weights = [numpy_helper.to_array(i) for i in g.initializer if i.data_type == onnx.TensorProto.INT8]
    assert weights and max(int(np.abs(w.astype(np.int16)).max()) for w in weights) == 64
    integer = [n.name for n in g.node if n.op_type == "MatMulInteger"]
    kept = [n.name for n in g.node if n.op_type == "MatMul" and "down_proj" in n.name]
    # q, k, v, o, gate and up of each block in int8; each block's down_proj and the output head in fp32
    assert out["int8_matmuls"] == len(integer) == 6 * SMALL.layers
    assert len(kept) == SMALL.layers and not any("down_proj" in n for n in integer)
    rep = check_parity(m, fp, str(tmp_path / "model.int8.onnx"), trials=3)
    assert rep.int8_top1_agreement >= 0.5


def test_next_token_agreement_counts_every_position(tmp_path):
    from icicle.export import next_token_agreement, quantize_int8

    tiny = os.path.join(os.path.dirname(__file__), "..", "..", "models", "tiny")
    fp = os.path.join(tiny, "model.onnx")
    assert next_token_agreement(tiny, fp, passages=3, tokens=40) == {"agreement": 1.0, "positions": 120, "passages": 3}
    # its int8 graph (7-bit weights) mostly agrees: 0.973 over 1,613 positions
    quantize_int8(fp, str(tmp_path / "q.onnx"))
    got = next_token_agreement(tiny, str(tmp_path / "q.onnx"), passages=3, tokens=40)
    assert got["positions"] == 120 and 0.5 < got["agreement"] <= 1.0
    # by default the manifest's own int8 file, with the bits it states
    assert next_token_agreement(tiny, passages=1, tokens=10)["int8_weight_bits"] == 7


def test_untied_head_gives_the_same_logits_and_goes_int8(exported, tmp_path):
    import json
    import shutil

    import onnx

    from icicle.decode import causal_mask_np
    from icicle.export import add_int8, untie_head

    m, fp, _ = exported
    g = onnx.load(fp)
    assert untie_head(g) and not untie_head(g), "the head is rewritten once; the rewritten graph has none left"
    untied = str(tmp_path / "untied.onnx")
    onnx.save(g, untied)
    past = [np.zeros((1, 0, 2, 8), np.float32)] * 4
    ids, pos, idx = np.array([[5, 17, 3, 250]]), np.array([[0, 1, 2, 3]]), np.array([0, 1, 2, 3])
    want, _ = ort_step(ort_session(fp), SMALL.layers)(ids, pos, causal_mask_np(0, 4), idx, past)
    got, _ = ort_step(ort_session(untied), SMALL.layers)(ids, pos, causal_mask_np(0, 4), idx, past)
    assert np.abs(got - want).max() <= 1e-5  # the same products, in another layout

    shutil.copy(fp, tmp_path / "model.onnx")
    (tmp_path / "manifest.json").write_text(json.dumps({"name": "fixture", "onnx": "model.onnx"}))
    out = add_int8(str(tmp_path), head=True)
    q = onnx.load(str(tmp_path / "model.int8.onnx")).graph
    integer = [n.name for n in q.node if n.op_type == "MatMulInteger"]
    assert out["int8_head"] and out["int8_matmuls"] == len(integer) == 6 * SMALL.layers + 1
    assert not any(n.op_type == "MatMul" and n.name == "/MatMul" for n in q.node), "no fp32 head left"
    rep = check_parity(m, fp, str(tmp_path / "model.int8.onnx"), trials=3)
    assert rep.int8_top1_agreement >= 0.5


def test_int8_works_beside_the_model_and_says_when_there_is_no_room(exported, tmp_path, monkeypatch):
    """The working copies (untied graph, ONNX Runtime's shape-inferred copy) live beside the model and are gone
    after; with too little free space there, add_int8 stops before writing anything and names the folder and
    both sizes (CI once failed with a bare protobuf "Wire format was corrupt" from a copy written short in /tmp)."""
    import collections
    import json
    import shutil

    import icicle.int8 as int8
    from icicle.export import add_int8

    _, fp, _ = exported
    shutil.copy(fp, tmp_path / "model.onnx")
    manifest = json.dumps({"name": "fixture", "onnx": "model.onnx"})
    (tmp_path / "manifest.json").write_text(manifest)
    real = shutil.disk_usage
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(int8.shutil, "disk_usage", lambda p: usage(10**9, 10**9, 1000))  # fake: a full disk
    with pytest.raises(SystemExit, match=rf"{tmp_path}: 0 MB free; making an int8 graph of .*model.onnx needs about \d+ MB"):
        add_int8(str(tmp_path), head=True)
    assert (tmp_path / "manifest.json").read_text() == manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "model.onnx"]
    monkeypatch.setattr(int8.shutil, "disk_usage", real)
    add_int8(str(tmp_path), head=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "model.int8.onnx", "model.onnx"]


def test_int8_refuses_a_directory_without_its_graph(tmp_path):
    import json

    from icicle.export import add_int8

    (tmp_path / "manifest.json").write_text(json.dumps({"name": "fixture", "onnx": "model.onnx"}))
    with pytest.raises(SystemExit, match="manifest field onnx names model.onnx, which does not exist"):
        add_int8(str(tmp_path))
    assert not (tmp_path / "model.int8.onnx").exists()


def test_length_scale_leaves_short_rows_and_sharpens_long_ones_in_the_graph_too(tmp_path):
    """Decoder.set_length_ref (issue 26): rows that see at most ref positions compute exactly what the unscaled
    model computes (a stored block stays right); rows that see more differ; the exported graph does the same."""
    torch.manual_seed(1)
    m = Decoder(SMALL).eval()
    rng = np.random.default_rng(1)
    past_len, n = 40, 3
    past = [torch.from_numpy(rng.standard_normal((1, past_len, 2, 8)).astype(np.float32)) for _ in range(4)]
    ids = torch.tensor([[5, 6, 7]])
    pos = torch.tensor([[past_len, past_len + 1, past_len + 2]])
    idx = torch.tensor([0, 1, 2])
    mask = torch.from_numpy(causal_mask_np(past_len, n))
    mask[0, 0, :30] = -1e9  # row 0 sees 11 positions, rows 1 and 2 see 42 and 43

    def logits(ref):
        m.set_length_ref(ref)
        with torch.no_grad():
            return m.step(ids, pos, mask, idx, *past)[0][0].numpy()

    base, scaled = logits(0), logits(20)
    assert np.array_equal(base[0], scaled[0])  # 11 <= 20 positions: scale 1, bit for bit
    assert np.abs(base[1:] - scaled[1:]).max() > 1e-3  # 42 and 43 > 20: ln(42)/ln(20) = 1.25
    assert np.array_equal(logits(50), base)  # every row within 50
    with pytest.raises(ValueError, match="length ref 1"):
        m.set_length_ref(1)
    m.set_length_ref(20)
    fp = str(tmp_path / "scaled.onnx")
    export_onnx(m, fp)
    m.set_length_ref(0)
    got, _ = ort_step(ort_session(fp), SMALL.layers)(ids.numpy(), pos.numpy(), mask.numpy(), idx.numpy(),
                                                   [p.numpy() for p in past])
    assert np.abs(got[0] - scaled).max() <= FP32_ATOL
    assert np.abs(got[0][1:] - base[1:]).max() > 1e-3
