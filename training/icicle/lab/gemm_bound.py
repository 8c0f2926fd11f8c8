"""What the matrix products of these cores allow the first-stage encoder (bge-small: 12 layers, width 384, FFN 1,536):
one-node ONNX Runtime graphs of the encoder's linear-layer shapes, timed alone, and the passages a second they bound.

    python -m icicle.lab.gemm_bound --rows 134 1072 --threads 1 2

Each product is a graph of one node: int8 `MatMulInteger` (u8 activations x s8 weights, what the served dynamic int8
graph runs) and fp32 `MatMul`, for the shapes [rows, 384] x [384, 1536], [rows, 1536] x [1536, 384] and
[rows, 384] x [384, 384]. The median of `--repeats` runs after `--warmup` is printed as GOP/s (2 x rows x K x N).
The bound: a passage of `--tokens` tokens needs 12 x (4 x 384 x 384 + 2 x 384 x 1536) x 2 multiply-adds a token in
the linear layers (42.5 M operations) at the int8 rate, and 12 x 4 x tokens^2 x 384 in attention at the fp32 rate;
everything else (layer norms, GELU, softmax, quantising the activations) is taken as free, so the real graph is
slower than the bound.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

LAYERS, WIDTH, FFN = 12, 384, 1536
SHAPES = ((WIDTH, FFN), (FFN, WIDTH), (WIDTH, WIDTH))


def product(k: int, n: int, int8: bool):
    """A one-node graph: x [rows, k] times a constant weight [k, n]."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    if int8:
        w = numpy_helper.from_array(rng.integers(-127, 128, (k, n), dtype=np.int8), "w")
        zx = numpy_helper.from_array(np.array(128, np.uint8), "zx")
        zw = numpy_helper.from_array(np.array(0, np.int8), "zw")
        node = helper.make_node("MatMulInteger", ["x", "w", "zx", "zw"], ["y"])
        graph = helper.make_graph([node], "p", [helper.make_tensor_value_info("x", T.UINT8, ["r", k])],
                                  [helper.make_tensor_value_info("y", T.INT32, ["r", n])], [w, zx, zw])
    else:
        w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        graph = helper.make_graph([node], "p", [helper.make_tensor_value_info("x", T.FLOAT, ["r", k])],
                                  [helper.make_tensor_value_info("y", T.FLOAT, ["r", n])], [w])
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def rate(model: bytes, rows: int, k: int, n: int, int8: bool, threads: int, warmup: int, repeats: int) -> float:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (rows, k), dtype=np.uint8) if int8 else rng.standard_normal((rows, k)).astype(np.float32)
    times = []
    for i in range(warmup + repeats):
        t = time.perf_counter()
        sess.run(None, {"x": x})
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return 2 * rows * k * n / statistics.median(times) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[134, 1072])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tokens", type=int, default=134, help="the passage length the bound is computed for")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args()
    print(f"{'product':<8}{'rows':>6}{'threads':>8}  " + "  ".join(f"{k}x{n:<6}" for k, n in SHAPES) + "  GOP/s")
    best: dict[tuple[bool, int], float] = {}
    for int8 in (True, False):
        models = {s: product(*s, int8) for s in SHAPES}
        for rows in a.rows:
            for threads in a.threads:
                got = [rate(models[s], rows, *s, int8, threads, a.warmup, a.repeats) for s in SHAPES]
                # the linear layers' mix: per layer 4 of 384x384 and one each of the FFN shapes, by operations
                ops = [2 * WIDTH * FFN, 2 * FFN * WIDTH, 4 * WIDTH * WIDTH]
                mix = sum(ops) / sum(o / g for o, g in zip(ops, got))
                best[(int8, threads)] = max(best.get((int8, threads), 0), mix)
                print(f"{'int8' if int8 else 'fp32':<8}{rows:>6}{threads:>8}  " + "  ".join(f"{g:>10.0f}" for g in got)
                      + f"  {mix:.0f} (the layers' mix)")
    linear = LAYERS * (4 * WIDTH * WIDTH + 2 * WIDTH * FFN) * 2 * a.tokens
    attention = LAYERS * 4 * a.tokens ** 2 * WIDTH
    print(f"a {a.tokens}-token passage: {linear / 1e9:.2f} GOP in the linear layers, "
          f"{attention / 1e9:.2f} GOP in attention")
    for threads in a.threads:
        ms = (linear / best[(True, threads)] + attention / best[(False, threads)]) / 1e6
        print(f"bound with {threads} thread(s): {ms:.1f} ms a passage, {1000 / ms:.1f} passages a second")


if __name__ == "__main__":
    main()
