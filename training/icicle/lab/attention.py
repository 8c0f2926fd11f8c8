"""What the attention over stored blocks costs, by the four ways ONNX Runtime's CPU provider can compute it
(issue 26): a Run by block reading feeds ROWS tokens (the query and the copy tree's first chunk) over PAST cached
positions (100 candidates of about 37 tokens: 3,692), and at 100 candidates that attention is most of the Run.

    python -m icicle.lab.attention --past 3692 --rows 38        # 100 candidates (BenchmarkBlockRank: 38 fed)
    python -m icicle.lab.attention --past 433 --rows 17         # 10 candidates

Each graph is LAYERS attention layers of the reader's shape (9 query heads sharing 3 key/value heads of 64), each
layer's output the next one's query, and nothing else (no weights), timed on 2 intra-op threads:

- `step`: the exported step graph's attention (`model.py` `Attention.forward` with a past): the past
  [1, past, kv_heads, head_dim] concatenated with the new keys and values, transposed, the grouped heads' two
  products, the additive mask and the softmax.
- `gqa`: com.microsoft GroupQueryAttention with the past and present sharing one buffer [1, kv_heads, capacity,
  head_dim] (no concatenation or transposition of the past), causal over the new rows, with or without an additive
  attention bias (which the copy tree's rows would need).
- `int8`: the past kept as the block store keeps it (int8, one scale per position and head) and read by u8 x s8
  MatMulInteger for both products: the query quantised per Run, the probabilities times the values' scales
  normalised per row to [0, 1] and quantised with a fixed scale; the new rows' part in fp32 beside it.

- `split`: the past kept in the layouts the two products read (keys [1, kv_heads, head_dim, past], values
  [1, kv_heads, past, head_dim], as a block store could write them when it places blocks), so that no copy of the
  past is made: the scores over the past and over the new rows are two products, concatenated (the scores, not
  the past), masked and normalised together, and the output is the two value products summed.

All four compute the same attention (tests/test_attention.py: `gqa` within 1e-4 of `step`, `int8` within its
quantisation's error), so their times compare the methods, not different maths.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64
MASKED = float(np.finfo(np.float32).min)


def _make(nodes, inputs, outputs, inits=()):
    from onnx import helper

    graph = helper.make_graph(nodes, "attention", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def _shapes(past: int, rows: int) -> list:
    """The reshapes both decomposed graphs use (grouping the query heads by their key/value head and back), the
    scores' scale, as initializers."""
    from onnx import numpy_helper

    rep, m = HEADS // KV_HEADS, past + rows
    dims = {"s_q": [1, rows, KV_HEADS, rep, HEAD_DIM], "s_qg": [1, KV_HEADS, rep * rows, HEAD_DIM],
            "s_kv": [1, rows, KV_HEADS, HEAD_DIM], "s_att": [1, KV_HEADS, rep, rows, m], "s_mask": [1, 1, 1, rows, m],
            "s_w": [1, KV_HEADS, rep * rows, m], "s_o": [1, KV_HEADS, rep, rows, HEAD_DIM], "s_y": [1, rows, HEADS * HEAD_DIM]}
    return [numpy_helper.from_array(np.array(d, np.int64), name) for name, d in dims.items()] + [
        numpy_helper.from_array(np.array(1 / np.sqrt(HEAD_DIM), np.float32), "scale")]


def _qkv_mask(past: int, rows: int) -> list:
    """The inputs every graph starts from: q [1,rows,H*D], k and v [1,rows,KV*D], mask [1,rows,past+rows]."""
    from onnx import TensorProto as T
    from onnx import helper

    return [helper.make_tensor_value_info("q", T.FLOAT, [1, rows, HEADS * HEAD_DIM]),
            helper.make_tensor_value_info("k", T.FLOAT, [1, rows, KV_HEADS * HEAD_DIM]),
            helper.make_tensor_value_info("v", T.FLOAT, [1, rows, KV_HEADS * HEAD_DIM]),
            helper.make_tensor_value_info("mask", T.FLOAT, [1, rows, past + rows])]


def _new_rows() -> list:
    """Nodes making "knew" [1,KV,D,rows] and "vnew" [1,KV,rows,D] from the new rows' k and v, and "mask5"."""
    from onnx import helper

    return [helper.make_node("Reshape", ["k", "s_kv"], ["k4"]), helper.make_node("Transpose", ["k4"], ["knew"], perm=[0, 2, 3, 1]),
            helper.make_node("Reshape", ["v", "s_kv"], ["v4"]), helper.make_node("Transpose", ["v4"], ["vnew"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", ["mask", "s_mask"], ["mask5"])]


def _slices(past: int, rows: int) -> list:
    """The initializers of a Slice of the last axis into the past's columns and the new rows'."""
    from onnx import numpy_helper

    return [numpy_helper.from_array(np.array(v, np.int64), n)
            for n, v in (("ax3", [3]), ("at0", [0]), ("atp", [past]), ("atm", [past + rows]))]


def _grouped(x: str, p: str) -> list:
    """Nodes making p+"qg" [1,KV,rep*rows,D] from the query x: heads grouped by the key/value head they read."""
    from onnx import helper

    return [helper.make_node("Reshape", [x, "s_q"], [p + "q5"]),
            helper.make_node("Transpose", [p + "q5"], [p + "q5t"], perm=[0, 2, 3, 1, 4]),
            helper.make_node("Reshape", [p + "q5t", "s_qg"], [p + "qg"])]


def _softmax(scores: str, p: str) -> list:
    """Nodes from the unscaled scores [1,KV,rep*rows,m] to the probabilities p+"w": scaled, masked, softmax."""
    from onnx import helper

    return [helper.make_node("Mul", [scores, "scale"], [p + "s1"]),
            helper.make_node("Reshape", [p + "s1", "s_att"], [p + "s5"]),
            helper.make_node("Add", [p + "s5", "mask5"], [p + "sm"]),
            helper.make_node("Softmax", [p + "sm"], [p + "w5"], axis=-1),
            helper.make_node("Reshape", [p + "w5", "s_w"], [p + "w"])]


def _ungrouped(p: str) -> list:
    """Nodes from a layer's grouped output p+"o" [1,KV,rep*rows,D] to p+"y" [1,rows,H*D], the next query."""
    from onnx import helper

    return [helper.make_node("Reshape", [p + "o", "s_o"], [p + "o5"]),
            helper.make_node("Transpose", [p + "o5"], [p + "o5t"], perm=[0, 3, 1, 2, 4]),
            helper.make_node("Reshape", [p + "o5t", "s_y"], [p + "y"])]


def step_graph(past: int, rows: int, layers: int):
    """The step graph's attention: inputs q [1,rows,H*D], k and v [1,rows,KV*D], mask [1,rows,past+rows], p{l}k and
    p{l}v [1,past,KV,D]; output y [1,rows,H*D]."""
    from onnx import TensorProto as T
    from onnx import helper

    inputs = _qkv_mask(past, rows)
    nodes = [helper.make_node("Reshape", ["k", "s_kv"], ["k4"]), helper.make_node("Reshape", ["v", "s_kv"], ["v4"]),
             helper.make_node("Reshape", ["mask", "s_mask"], ["mask5"])]
    x = "q"
    for l in range(layers):
        p = f"l{l}_"
        inputs += [helper.make_tensor_value_info(f"p{l}k", T.FLOAT, [1, past, KV_HEADS, HEAD_DIM]),
                   helper.make_tensor_value_info(f"p{l}v", T.FLOAT, [1, past, KV_HEADS, HEAD_DIM])]
        nodes += _grouped(x, p) + [
            helper.make_node("Concat", [f"p{l}k", "k4"], [p + "kc"], axis=1),
            helper.make_node("Transpose", [p + "kc"], [p + "kk"], perm=[0, 2, 3, 1]),
            helper.make_node("Concat", [f"p{l}v", "v4"], [p + "vc"], axis=1),
            helper.make_node("Transpose", [p + "vc"], [p + "vv"], perm=[0, 2, 1, 3]),
            helper.make_node("MatMul", [p + "qg", p + "kk"], [p + "s0"]),
        ] + _softmax(p + "s0", p) + [helper.make_node("MatMul", [p + "w", p + "vv"], [p + "o"])] + _ungrouped(p)
        x = p + "y"
    return _make(nodes, inputs, [helper.make_tensor_value_info(x, T.FLOAT, [1, rows, HEADS * HEAD_DIM])], _shapes(past, rows))


def gqa_graph(past: int, rows: int, layers: int, bias: bool):
    """GroupQueryAttention layers: inputs q, k, v as step_graph's, seqlens_k [1] and total [] (int32), bias
    [1,1,rows,past+rows] when asked, p{l}k and p{l}v [1,KV,past+rows,D] bound to the outputs o{l}k and o{l}v."""
    from onnx import TensorProto as T
    from onnx import helper

    cap = past + rows
    inputs = _qkv_mask(past, rows)[:3] + [helper.make_tensor_value_info("seqlens_k", T.INT32, [1]),
                                          helper.make_tensor_value_info("total", T.INT32, [])]
    if bias:
        inputs.append(helper.make_tensor_value_info("bias", T.FLOAT, [1, 1, rows, cap]))
    outputs, nodes, x = [], [], "q"
    for l in range(layers):
        for kv in "kv":
            inputs.append(helper.make_tensor_value_info(f"p{l}{kv}", T.FLOAT, [1, KV_HEADS, cap, HEAD_DIM]))
            outputs.append(helper.make_tensor_value_info(f"o{l}{kv}", T.FLOAT, [1, KV_HEADS, cap, HEAD_DIM]))
        ins = [x, "k", "v", f"p{l}k", f"p{l}v", "seqlens_k", "total", "", "", "", "bias" if bias else ""]
        nodes.append(helper.make_node("GroupQueryAttention", ins, [f"l{l}_y", f"o{l}k", f"o{l}v"], domain="com.microsoft",
                                      num_heads=HEADS, kv_num_heads=KV_HEADS))
        x = f"l{l}_y"
    return _make(nodes, inputs, [helper.make_tensor_value_info(x, T.FLOAT, [1, rows, HEADS * HEAD_DIM])] + outputs)


def int8_graph(past: int, rows: int, layers: int):
    """Attention over an int8 past: inputs q, k, v, mask as step_graph's, p{l}k8 [1,KV,D,past] and p{l}v8
    [1,KV,past,D] (int8), p{l}ks and p{l}vs [1,KV,1,past] (their scales)."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    arr = lambda name, a: numpy_helper.from_array(np.array(a), name)  # noqa: E731
    inits = _shapes(past, rows) + _slices(past, rows) + [
        arr("z_u8", np.uint8(0)), arr("z_i8", np.int8(0)), arr("inv255", np.float32(1 / 255))]
    inputs = _qkv_mask(past, rows)
    nodes = _new_rows()
    x = "q"
    for l in range(layers):
        p = f"l{l}_"
        inputs += [helper.make_tensor_value_info(f"p{l}k8", T.INT8, [1, KV_HEADS, HEAD_DIM, past]),
                   helper.make_tensor_value_info(f"p{l}ks", T.FLOAT, [1, KV_HEADS, 1, past]),
                   helper.make_tensor_value_info(f"p{l}v8", T.INT8, [1, KV_HEADS, past, HEAD_DIM]),
                   helper.make_tensor_value_info(f"p{l}vs", T.FLOAT, [1, KV_HEADS, 1, past])]
        nodes += _grouped(x, p) + [
            # scores over the past: (u8 q - zp) x s8 k, times the query's scale and each position's
            helper.make_node("DynamicQuantizeLinear", [p + "qg"], [p + "qu", p + "qs", p + "qz"]),
            helper.make_node("MatMulInteger", [p + "qu", f"p{l}k8", p + "qz", "z_i8"], [p + "sp32"]),
            helper.make_node("Cast", [p + "sp32"], [p + "spf"], to=T.FLOAT),
            helper.make_node("Mul", [f"p{l}ks", p + "qs"], [p + "kqs"]),
            helper.make_node("Mul", [p + "spf", p + "kqs"], [p + "sp"]),
            helper.make_node("MatMul", [p + "qg", "knew"], [p + "sn"]),
            helper.make_node("Concat", [p + "sp", p + "sn"], [p + "s0"], axis=-1),
        ] + _softmax(p + "s0", p) + [
            # the past's values: probabilities times the values' scales, per row to [0, 1], u8 x s8
            helper.make_node("Slice", [p + "w", "at0", "atp", "ax3"], [p + "wp"]),
            helper.make_node("Slice", [p + "w", "atp", "atm", "ax3"], [p + "wn"]),
            helper.make_node("Mul", [p + "wp", f"p{l}vs"], [p + "wv"]),
            helper.make_node("ReduceMax", [p + "wv"], [p + "rm"], axes=[-1], keepdims=1),
            helper.make_node("Div", [p + "wv", p + "rm"], [p + "wnorm"]),
            helper.make_node("QuantizeLinear", [p + "wnorm", "inv255", "z_u8"], [p + "wu"]),
            helper.make_node("MatMulInteger", [p + "wu", f"p{l}v8", "z_u8", "z_i8"], [p + "op32"]),
            helper.make_node("Cast", [p + "op32"], [p + "opf"], to=T.FLOAT),
            helper.make_node("Mul", [p + "rm", "inv255"], [p + "rs"]),
            helper.make_node("Mul", [p + "opf", p + "rs"], [p + "op"]),
            helper.make_node("MatMul", [p + "wn", "vnew"], [p + "on"]),
            helper.make_node("Add", [p + "op", p + "on"], [p + "o"]),
        ] + _ungrouped(p)
        x = p + "y"
    return _make(nodes, inputs, [helper.make_tensor_value_info(x, T.FLOAT, [1, rows, HEADS * HEAD_DIM])], inits)


def split_graph(past: int, rows: int, layers: int):
    """The past in the products' layouts: inputs q, k, v, mask as step_graph's, p{l}kt [1,KV,D,past] and p{l}vt
    [1,KV,past,D]; output y [1,rows,H*D]."""
    from onnx import TensorProto as T
    from onnx import helper

    inits = _shapes(past, rows) + _slices(past, rows)
    inputs = _qkv_mask(past, rows)
    nodes = _new_rows()
    x = "q"
    for l in range(layers):
        p = f"l{l}_"
        inputs += [helper.make_tensor_value_info(f"p{l}kt", T.FLOAT, [1, KV_HEADS, HEAD_DIM, past]),
                   helper.make_tensor_value_info(f"p{l}vt", T.FLOAT, [1, KV_HEADS, past, HEAD_DIM])]
        nodes += _grouped(x, p) + [
            helper.make_node("MatMul", [p + "qg", f"p{l}kt"], [p + "sp"]),
            helper.make_node("MatMul", [p + "qg", "knew"], [p + "sn"]),
            helper.make_node("Concat", [p + "sp", p + "sn"], [p + "s0"], axis=-1),
        ] + _softmax(p + "s0", p) + [
            helper.make_node("Slice", [p + "w", "at0", "atp", "ax3"], [p + "wp"]),
            helper.make_node("Slice", [p + "w", "atp", "atm", "ax3"], [p + "wn"]),
            helper.make_node("MatMul", [p + "wp", f"p{l}vt"], [p + "op"]),
            helper.make_node("MatMul", [p + "wn", "vnew"], [p + "on"]),
            helper.make_node("Add", [p + "op", p + "on"], [p + "o"]),
        ] + _ungrouped(p)
        x = p + "y"
    return _make(nodes, inputs, [helper.make_tensor_value_info(x, T.FLOAT, [1, rows, HEADS * HEAD_DIM])], inits)


def quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x [..., D] as int8 with one scale per row, max |x| / 127, as the block store keeps it."""
    s = np.abs(x).max(axis=-1, keepdims=True) / 127
    q = np.round(x / np.where(s == 0, 1, s)).astype(np.int8)
    return q, s[..., 0].astype(np.float32)


class Case:
    """One attention problem and each method's session for it. mask: 'causal' (every row sees the past and the rows
    up to itself) or 'tree' (row i also does not see row i-1: a copy tree's sibling)."""

    def __init__(self, past: int, rows: int, layers: int = 30, threads: int = 2, seed: int = 0, mask: str = "causal"):
        rng = np.random.default_rng(seed)
        self.past, self.rows, self.layers, self.threads = past, rows, layers, threads
        self.q = rng.standard_normal((1, rows, HEADS * HEAD_DIM), dtype=np.float32)
        self.k = rng.standard_normal((1, rows, KV_HEADS * HEAD_DIM), dtype=np.float32)
        self.v = rng.standard_normal((1, rows, KV_HEADS * HEAD_DIM), dtype=np.float32)
        self.pk = [rng.standard_normal((1, past, KV_HEADS, HEAD_DIM), dtype=np.float32) for _ in range(layers)]
        self.pv = [rng.standard_normal((1, past, KV_HEADS, HEAD_DIM), dtype=np.float32) for _ in range(layers)]
        self.mask = np.zeros((1, rows, past + rows), np.float32)
        for i in range(rows):
            self.mask[0, i, past + i + 1:] = MASKED
            if mask == "tree" and i > 0:
                self.mask[0, i, past + i - 1] = MASKED

    def _session(self, model):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = self.threads, 1, 3
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    def step(self):
        """A callable Run of the step graph's attention, returning y."""
        s = self._session(step_graph(self.past, self.rows, self.layers))
        feed = {"q": self.q, "k": self.k, "v": self.v, "mask": self.mask}
        for l in range(self.layers):
            feed[f"p{l}k"], feed[f"p{l}v"] = self.pk[l], self.pv[l]
        return lambda: s.run(None, feed)[0]

    def gqa(self, bias: bool):
        """A callable Run of GroupQueryAttention over one shared past/present buffer a layer, returning y. Without
        bias only a causal mask is expressed."""
        import onnxruntime as ort

        s = self._session(gqa_graph(self.past, self.rows, self.layers, bias))
        io = s.io_binding()
        for name, a in (("q", self.q), ("k", self.k), ("v", self.v), ("seqlens_k", np.array([self.past + self.rows - 1], np.int32)),
                        ("total", np.array(self.past + self.rows, np.int32))):
            io.bind_cpu_input(name, a)
        if bias:
            io.bind_cpu_input("bias", self.mask[:, None])
        self._buffers = []
        for l in range(self.layers):
            for kv, p in (("k", self.pk[l]), ("v", self.pv[l])):
                buf = np.zeros((1, KV_HEADS, self.past + self.rows, HEAD_DIM), np.float32)
                buf[:, :, : self.past] = p.transpose(0, 2, 1, 3)
                ov = ort.OrtValue.ortvalue_from_numpy(buf)
                self._buffers.append((buf, ov))
                io.bind_ortvalue_input(f"p{l}{kv}", ov)
                io.bind_ortvalue_output(f"o{l}{kv}", ov)
        io.bind_output(f"l{self.layers - 1}_y")

        def run():
            s.run_with_iobinding(io)
            return io.get_outputs()[-1].numpy()  # bound last

        return run

    def split(self):
        """A callable Run of the split products over a past in their layouts, returning y."""
        s = self._session(split_graph(self.past, self.rows, self.layers))
        feed = {"q": self.q, "k": self.k, "v": self.v, "mask": self.mask}
        for l in range(self.layers):
            feed[f"p{l}kt"] = np.ascontiguousarray(self.pk[l].transpose(0, 2, 3, 1))
            feed[f"p{l}vt"] = np.ascontiguousarray(self.pv[l].transpose(0, 2, 1, 3))
        return lambda: s.run(None, feed)[0]

    def int8(self):
        """A callable Run of the int8 past's attention, returning y."""
        s = self._session(int8_graph(self.past, self.rows, self.layers))
        feed = {"q": self.q, "k": self.k, "v": self.v, "mask": self.mask}
        for l in range(self.layers):
            kq, ks = quantize(self.pk[l].transpose(0, 2, 1, 3))  # [1,KV,past,D], scales [1,KV,past]
            vq, vs = quantize(self.pv[l].transpose(0, 2, 1, 3))
            feed[f"p{l}k8"], feed[f"p{l}ks"] = np.ascontiguousarray(kq.transpose(0, 1, 3, 2)), ks[:, :, None]
            feed[f"p{l}v8"], feed[f"p{l}vs"] = vq, vs[:, :, None]
        return lambda: s.run(None, feed)[0]


def timed(run, runs: int = 8) -> float:
    """Median milliseconds of runs Runs after two unscored."""
    for _ in range(2):
        run()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1000


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.lab.attention", description=__doc__.split("\n\n")[0])
    ap.add_argument("--past", type=int, default=3692, help="cached positions (100 candidates: 3692)")
    ap.add_argument("--rows", type=int, default=38, help="tokens fed (100 candidates: 38)")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=8)
    a = ap.parse_args(argv)
    c = Case(a.past, a.rows, a.layers, a.threads, mask="tree")
    rows = [("step graph (today)", c.step()), ("GroupQueryAttention, shared buffer, causal only", c.gqa(False)),
            ("GroupQueryAttention, shared buffer, with the tree's bias", c.gqa(True)), ("int8 past, MatMulInteger", c.int8()),
            ("past in the products' layouts, scores concatenated", c.split())]
    print(f"past {a.past}, rows {a.rows}, {a.layers} layers, {a.threads} threads: median of {a.runs} Runs")
    # Interleaved rounds, so that a change in the host's load touches every method alike.
    times = {name: [] for name, _ in rows}
    for _ in range(2):
        for name, run in rows:
            times[name].append(timed(run, a.runs))
    base = statistics.median(times[rows[0][0]])
    for name, ts in times.items():
        print(f"  {name:58s} {statistics.median(ts):7.1f} ms  ({statistics.median(ts) / base:.2f}x)")


if __name__ == "__main__":
    main()
