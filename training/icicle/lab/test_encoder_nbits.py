"""encoder_nbits.convert on a tiny random two-layer MatMul graph: the MatMulNBits graph stays close to fp32, its packing
means what the op reads, and a row's output does not depend on its batch-mates."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi._pybind_state import quantize_matmul_8bits

from icicle.lab.encoder_nbits import convert, dequantize, quantize_blocks

K, H, N = 128, 256, 64


def _tiny(rng) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """x [B, S, K] -> MatMul W1 -> Relu -> MatMul W2 -> y [B, S, N], and its two weights."""
    w1 = (rng.standard_normal((K, H)) / np.sqrt(K)).astype(np.float32)
    w2 = (rng.standard_normal((H, N)) / np.sqrt(H)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", N])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), w1, w2


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """y of the model on x, one thread."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("block,asym", [(32, False), (32, True), (128, False), (128, True)])
def test_close_to_fp32_and_rows_independent(block, asym):
    rng = np.random.default_rng(block + asym)
    model, w1, w2 = _tiny(rng)
    x = rng.standard_normal((4, 5, K)).astype(np.float32)
    x[1:] *= 50  # batch-mates far larger than row 0: a per-tensor activation scale would coarsen row 0
    ref = _run(model, x)
    nb, worst = convert(model, block, asym)
    assert [n.op_type for n in nb.graph.node] == ["MatMulNBits", "Relu", "MatMulNBits"]
    assert {t.name for t in nb.graph.initializer}.isdisjoint({"w1", "w2"})
    assert worst < 0.01
    got = _run(nb, x)
    err = np.abs(got - ref).max(-1) / np.abs(ref).max(-1)
    assert err.max() < 0.03, err.max()
    alone = _run(nb, x[:1])
    np.testing.assert_allclose(alone, got[:1], rtol=0, atol=1e-5 * np.abs(alone).max())


def test_packing_is_what_the_op_reads():
    # accuracy_level 0 computes with the dequantised weight in fp32, so it matches numpy up to float rounding
    rng = np.random.default_rng(7)
    model, w1, w2 = _tiny(rng)
    x = rng.standard_normal((2, 3, K)).astype(np.float32)
    nb, _ = convert(model, 32, True, accuracy=0)
    q = [quantize_blocks(w, 32, True) for w in (w1, w2)]
    d1, d2 = (dequantize(*p, w.shape[0]) for p, w in zip(q, (w1, w2)))
    np.testing.assert_allclose(_run(nb, x), np.maximum(x @ d1, 0) @ d2, rtol=1e-4, atol=1e-4)


def test_asym_blocks_match_onnxruntimes_quantiser():
    w = np.random.default_rng(3).standard_normal((K, N)).astype(np.float32)
    b, scales, zp = quantize_blocks(w, 32, True)
    ob, os_, oz = np.zeros_like(b), np.zeros_like(scales), np.zeros_like(zp)
    quantize_matmul_8bits(ob, w, os_, oz, 32, N, K, False)
    np.testing.assert_array_equal(b, ob)
    np.testing.assert_array_equal(zp, oz)
    np.testing.assert_allclose(scales, os_, rtol=1e-6)
