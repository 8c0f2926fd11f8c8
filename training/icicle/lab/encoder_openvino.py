"""The first-stage encoder under OpenVINO (PyPI's openvino and nncf) against ONNX Runtime, at batch 1: does another
runtime's CPU kernels, bf16 or a statically quantised int8 graph bring the encoder nearer its bound
(docs/research/2026-12-scale.md, "The encoder under OpenVINO")?

    python3 -m venv /tmp/ov && /tmp/ov/bin/pip install onnxruntime-openvino openvino nncf onnx numpy
    /tmp/ov/bin/python -m icicle.lab.encoder_openvino quantize --out /tmp/ovq/mixed.xml      # in training/
    /tmp/ov/bin/python -m icicle.lab.encoder_openvino measure --int8-ir /tmp/ovq/mixed.xml

`quantize` runs NNCF's post-training quantisation (transformer model type, the mixed preset) of the fp32 graph,
calibrated on 300 passages (100 a corpus, seed 11, not the measured ones). `measure` prints, for 60 passages a
corpus (seed 7), each graph's min and mean cosine to ONNX Runtime's fp32 (one thread), then ms a passage over the
nq_qed ones at 1 and 2 threads (graphs interleaved within each repeat, the median of the repeats): ONNX Runtime's
served int8 and fp32, OpenVINO's fp32 at f32 and at bf16 precision, and the NNCF graph.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from .encoder_nbits import CORPORA, WordPiece, passages, run, session

MODELS = "../models"
FP32, INT8 = f"{MODELS}/bge-small-en-v15/model.onnx", f"{MODELS}/bge-small-en-v15-q/model.onnx"


def feeds(seq: list[int]) -> dict[str, np.ndarray]:
    ids = np.array([seq], np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


class OpenVINO:
    """A compiled OpenVINO CPU model with run()'s session interface (one stream, latency hint)."""

    def __init__(self, core, path: str, threads: int, precision: str) -> None:
        cfg = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": precision,
               "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
        self.compiled = core.compile_model(core.read_model(path), "CPU", cfg)
        self.request = self.compiled.create_infer_request()
        self.out = self.compiled.output("last_hidden_state")

    def run(self, _names, inputs):
        return [self.request.infer(inputs)[self.out]]


def quantize_cmd(a: argparse.Namespace) -> None:
    import nncf
    import openvino as ov

    wp = WordPiece(f"{MODELS}/bge-small-en-v15-q/tokenizer.json")
    cal = [wp.encode(t) for _, t in passages("../data", [100, 100, 100], 11)]
    model = ov.Core().read_model(FP32)
    q = nncf.quantize(model, nncf.Dataset(cal, feeds), subset_size=len(cal), model_type=nncf.ModelType.TRANSFORMER)
    ov.save_model(q, a.out)
    print(f"{a.out}: NNCF int8 of {FP32}, calibrated on {len(cal)} passages")


def measure_cmd(a: argparse.Namespace) -> None:
    import openvino as ov

    core = ov.Core()
    wp = WordPiece(f"{MODELS}/bge-small-en-v15-q/tokenizer.json")
    drawn = passages("../data", [a.n] * len(CORPORA), 7)
    seqs, corpus = [wp.encode(t) for _, t in drawn], [c for c, _ in drawn]
    print(f"OpenVINO {ov.__version__}; CPU capabilities {core.get_property('CPU', 'OPTIMIZATION_CAPABILITIES')}")
    graphs = {}
    for t in (1, 2):
        graphs[f"onnxruntime int8 (served), {t} thread(s)"] = session(INT8, t)
        graphs[f"onnxruntime fp32, {t} thread(s)"] = session(FP32, t)
        graphs[f"openvino fp32 at f32, {t} thread(s)"] = OpenVINO(core, FP32, t, "f32")
        graphs[f"openvino fp32 at bf16, {t} thread(s)"] = OpenVINO(core, FP32, t, "bf16")
        if a.int8_ir:
            graphs[f"openvino nncf int8, {t} thread(s)"] = OpenVINO(core, a.int8_ir, t, "f32")
    ref = np.stack([run(graphs["onnxruntime fp32, 1 thread(s)"], [s])[0] for s in seqs])
    for name, g in graphs.items():
        if name.endswith(", 1 thread(s)"):
            cos = np.sum(np.stack([run(g, [s])[0] for s in seqs]) * ref, axis=1)
            parts = [f"{c} min {cos[[i for i, x in enumerate(corpus) if x == c]].min():.5f} "
                     f"mean {cos[[i for i, x in enumerate(corpus) if x == c]].mean():.5f}" for c in CORPORA]
            print(f"cosine to fp32 | {name.removesuffix(', 1 thread(s)')} | " + " | ".join(parts), flush=True)
    speed = [s for s, c in zip(seqs, corpus) if c == "nq_qed"]
    times: dict[str, list[float]] = {k: [] for k in graphs}
    for _ in range(a.repeats):
        for name, g in graphs.items():
            t0 = time.perf_counter()
            for s in speed:
                run(g, [s])
            times[name].append((time.perf_counter() - t0) / len(speed) * 1000)
    print(f"speed over {len(speed)} nq_qed passages, {np.mean(list(map(len, speed))):.1f} tokens on average")
    for name, v in times.items():
        m = statistics.median(v)
        print(f"{name}: {m:.2f} ms a passage ({1000 / m:.1f} a second); repeats {' '.join(f'{x:.1f}' for x in v)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quantize")
    q.add_argument("--out", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--int8-ir", default="", help="quantize's .xml")
    m.add_argument("--n", type=int, default=60, help="passages drawn a corpus")
    m.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    {"quantize": quantize_cmd, "measure": measure_cmd}[a.cmd](a)


if __name__ == "__main__":
    main()
