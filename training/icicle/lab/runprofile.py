"""Where one Run of an exported reader spends its time (issue 26): ONNX Runtime's own profile of a Run that feeds
ROWS tokens over PAST cached positions, by operator type.

    python -m icicle.lab.runprofile ../models/reader135/model.onnx --past 3692 --rows 38 --logits 8
    python -m icicle.lab.runprofile ../models/reader135/model.onnx --past 0 --rows 38     # the weights alone

A request by block reading is one such Run: the stored blocks are the past (100 candidates of about 37 tokens:
3,692 positions), the query and the copy tree the rows, the tree's branching nodes the logits rows. Every row
sees the whole past and the rows before it (the shared layout's query); the cached keys and values are random,
which costs what real ones cost. The Run is timed on 2 intra-op threads, as the sidecar runs it on these cores,
then profiled: operator times are summed by type and averaged over the profiled Runs.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
import time

import numpy as np


def feeds(sess, past: int, rows: int, logits: int, seed: int = 0) -> dict:
    """One Run's inputs: rows tokens at positions past.., each seeing the past and itself causally."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((1, rows, past + rows), np.float32)
    for i in range(rows):
        mask[0, i, past + i + 1 :] = np.finfo(np.float32).min
    out = {
        "input_ids": rng.integers(10, 1000, (1, rows)).astype(np.int64),
        "position_ids": (past + np.arange(rows, dtype=np.int64))[None],
        "attention_mask": mask,
        "logits_index": np.linspace(0, rows - 1, max(1, min(logits, rows))).astype(np.int64),
    }
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values."):
            heads, dim = i.shape[2], i.shape[3]
            out[i.name] = rng.standard_normal((1, past, heads, dim), dtype=np.float32)
    return out


def profile(model: str, past: int, rows: int, logits: int = 1, runs: int = 5, threads: int = 2) -> dict:
    """Median wall time of a Run and ONNX Runtime's per-operator-type milliseconds a Run."""
    import onnxruntime as ort

    def session(prof_dir: str | None):
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.log_severity_level = 3
        if prof_dir:
            so.enable_profiling, so.profile_file_prefix = True, os.path.join(prof_dir, "run")
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

    s = session(None)
    f = feeds(s, past, rows, logits)
    s.run(["logits"], f)
    wall = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(["logits"], f)
        wall.append(time.perf_counter() - t)
    with tempfile.TemporaryDirectory() as d:
        p = session(d)
        for _ in range(runs):
            p.run(["logits"], f)
        with open(p.end_profiling()) as fh:
            events = json.load(fh)
    by_op: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"]
    # The profiled session's first Run includes its warm-up, so the averages lean a little high.
    ops = {k: round(v / runs / 1000, 2) for k, v in by_op.most_common()}
    return {"model": model, "past": past, "rows": rows, "logits_rows": len(f["logits_index"]), "threads": threads,
            "run_ms_median": round(1000 * statistics.median(wall), 1), "ops_ms": ops,
            "ops_total_ms": round(sum(ops.values()), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="an exported reader's model.onnx")
    ap.add_argument("--past", type=int, default=3692, help="cached positions (100 blocks of about 37: 3692)")
    ap.add_argument("--rows", type=int, default=38, help="tokens fed (the query and the copy tree)")
    ap.add_argument("--logits", type=int, default=8, help="logits rows read (the tree's branching nodes)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    r = profile(a.model, a.past, a.rows, a.logits, a.runs, a.threads)
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
