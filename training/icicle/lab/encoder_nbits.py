"""An int8 first-stage encoder that keeps a passage's vector whoever shares its batch: every weight MatMul of the fp32
bge-small-en-v1.5 graph replaced by ONNX Runtime's contrib op com.microsoft.MatMulNBits (8-bit weights quantised per
block along K; with accuracy_level 4 the activations are quantised at run time per row and per block, so no row's
scale depends on another row), measured against the fp32 graph and the served per-tensor dynamic int8 graph:

    python -m icicle.lab.encoder_nbits convert --src ../models/bge-small-en-v15/model.onnx --dst /tmp/nb32.onnx --block 32
    python -m icicle.lab.encoder_nbits measure --fp32 ../models/bge-small-en-v15/model.onnx \\
        --int8 ../models/bge-small-en-v15-q/model.onnx --nbits /tmp/nb32.onnx /tmp/nb128.onnx --n 300 200 200
    python -m icicle.lab.encoder_nbits graph --model /tmp/nb32.onnx     # the operators ONNX Runtime runs

`measure` draws (seeded) N passages from each of nq_qed, cranfield and cacm (title, newline, text, as the sidecar
embeds them), tokenises them with a small pure-Python BERT WordPiece over the encoder's tokenizer.json (the same ids go
to every graph; it does reproduce the ids in the encoder's golden.json) and prints three tables:
  quality   per corpus, the min and mean cosine of each graph's vector (CLS, L2-normalised, batch 1) to fp32's;
  batch     over a seeded subset, a passage's vector alone vs inside a padded batch (batched by length, and drawn at
            random so padding is heavy): max abs difference and min cosine;
  speed     ms per passage and passages/s for 1 and 2 intra-op threads at batch 1 and batched by length, over a fixed
            subset; the graphs and settings take turns within each repeat and the median over repeats is printed (the
            cores are shared, so the spread is printed too).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import time
import unicodedata

import numpy as np
import onnx
from onnx import helper, numpy_helper

CORPORA = ("nq_qed", "cranfield", "cacm")
CLS, SEP, UNK = "[CLS]", "[SEP]", "[UNK]"


def quantize_blocks(w: np.ndarray, block: int, asym: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """MatMulNBits' 8-bit B, scales and zero points (None: the default 128) of a [K, N] weight, blocks along K."""
    k, n = w.shape
    nb = -(-k // block)
    wt = np.zeros((n, nb * block), np.float32)
    wt[:, :k] = w.T
    wt = wt.reshape(n, nb, block)
    if asym:
        lo, hi = np.minimum(wt.min(-1), 0), np.maximum(wt.max(-1), 0)
        scale = (hi - lo) / 255
        scale = np.where(scale == 0, 1, scale).astype(np.float32)
        zp = np.clip(np.round(-lo / scale), 0, 255)
        q = np.clip(np.round(wt / scale[..., None]) + zp[..., None], 0, 255)
        return q.astype(np.uint8), scale, zp.astype(np.uint8)
    scale = np.abs(wt).max(-1) / 127
    scale = np.where(scale == 0, 1, scale).astype(np.float32)
    q = np.clip(np.round(wt / scale[..., None]) + 128, 1, 255)
    return q.astype(np.uint8), scale, None


def dequantize(b: np.ndarray, scales: np.ndarray, zp: np.ndarray | None, k: int) -> np.ndarray:
    """The [K, N] weight that MatMulNBits' B, scales and zero points stand for."""
    z = np.full(scales.shape, 128, np.float32) if zp is None else zp.astype(np.float32)
    w = (b.astype(np.float32) - z[..., None]) * scales[..., None]
    return w.reshape(b.shape[0], -1)[:, :k].T


def convert(model: onnx.ModelProto, block: int, asym: bool, accuracy: int = 4) -> tuple[onnx.ModelProto, float]:
    """The model with every MatMul by a 2-D initializer replaced by MatMulNBits, and the largest relative weight error."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    nodes, used, done, worst = [], set(), {}, 0.0
    for node in g.node:
        base = node.input[1] if node.op_type == "MatMul" else ""
        if base not in inits or len(inits[base].dims) != 2:
            nodes.append(node)
            used.update(node.input)
            continue
        k, n = inits[base].dims
        if base not in done:  # a weight shared by several MatMuls is quantised once
            w = numpy_helper.to_array(inits[base]).astype(np.float32)
            b, scales, zp = quantize_blocks(w, block, asym)
            worst = max(worst, float(np.abs(dequantize(b, scales, zp, k) - w).max() / np.abs(w).max()))
            new = [numpy_helper.from_array(b, base + "_q8"), numpy_helper.from_array(scales.reshape(-1), base + "_scales")]
            if zp is not None:
                new.append(numpy_helper.from_array(zp.reshape(-1), base + "_zp"))
            g.initializer.extend(new)
            done[base] = [t.name for t in new]
        used.update([node.input[0]] + done[base])
        nodes.append(helper.make_node("MatMulNBits", [node.input[0]] + done[base], list(node.output),
                                      name=(node.name or node.output[0]) + "_q8", domain="com.microsoft", K=k, N=n, bits=8,
                                      block_size=block, accuracy_level=accuracy))
    keep = [t for t in g.initializer if t.name in used]
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(keep)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model, worst


class WordPiece:
    """BERT uncased tokenisation (clean, CJK split, lowercase, strip accents, punctuation split, greedy WordPiece)."""

    def __init__(self, tokenizer_json: str, max_tokens: int = 512):
        """Load the vocabulary of a tokenizer.json."""
        with open(tokenizer_json) as f:
            self.vocab = json.load(f)["model"]["vocab"]
        self.max_tokens = max_tokens

    @staticmethod
    def _words(text: str) -> list[str]:
        """The normalised text split on whitespace and around each punctuation or CJK character."""
        out = []
        for ch in unicodedata.normalize("NFD", text.lower()):
            cat, cp = unicodedata.category(ch), ord(ch)
            if cp in (0, 0xFFFD) or (cat in ("Cc", "Cf") and ch not in "\t\n\r") or cat == "Mn":
                continue
            cjk = 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF or 0x20000 <= cp <= 0x2FA1F
            punct = 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or cat.startswith("P")
            out.append(f" {ch} " if cjk or punct else " " if ch.isspace() else ch)
        return "".join(out).split()

    def _pieces(self, word: str) -> list[int]:
        """Greedy longest-match-first ids of one word, [UNK] when a piece is missing."""
        if len(word) > 100:
            return [self.vocab[UNK]]
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = ("##" if start else "") + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return [self.vocab[UNK]]
            start = end
        return ids

    def encode(self, text: str) -> list[int]:
        """[CLS] ids [SEP], truncated to max_tokens."""
        ids = [i for w in self._words(text) for i in self._pieces(w)][: self.max_tokens - 2]
        return [self.vocab[CLS]] + ids + [self.vocab[SEP]]


def passages(data_dir: str, counts: list[int], seed: int) -> list[tuple[str, str]]:
    """(corpus, title newline text) for a seeded draw of counts[i] documents from each of CORPORA."""
    out = []
    for name, n in zip(CORPORA, counts):
        with gzip.open(os.path.join(data_dir, name, "corpus.jsonl.gz"), "rt") as f:
            docs = [json.loads(line) for line in f]
        for d in random.Random(seed).sample(docs, n):
            title, text = d.get("title", ""), d.get("text", "")
            out.append((name, "\n".join(s for s in (title, text) if s)))
    return out


def session(path: str, threads: int):
    """An ONNX Runtime CPU session on threads intra-op threads."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def run(sess, seqs: list[list[int]]) -> np.ndarray:
    """The L2-normalised CLS vectors of one padded batch."""
    ids = np.zeros((len(seqs), max(map(len, seqs))), np.int64)
    mask = np.zeros_like(ids)
    for r, s in enumerate(seqs):
        ids[r, : len(s)], mask[r, : len(s)] = s, 1
    h = sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask,
                                         "token_type_ids": np.zeros_like(ids)})[0][:, 0]
    return h / np.linalg.norm(h, axis=1, keepdims=True)


def groups(lengths: list[int], batch: int, rng: random.Random | None = None) -> list[list[int]]:
    """Indices in batches of batch: by length (shortest first), or in a random order when rng is given."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if rng is not None:
        rng.shuffle(order)
    return [order[i : i + batch] for i in range(0, len(order), batch)]


def embed(sess, seqs: list[list[int]], batches: list[list[int]]) -> np.ndarray:
    """Vectors of seqs, one row each in their order, run in the given batches."""
    out = np.zeros((len(seqs), 384), np.float32)
    for idx in batches:
        out[idx] = run(sess, [seqs[i] for i in idx])
    return out


def quality(models: dict[str, str], seqs, corpus: list[str], threads: int, batch: int, batch_n: int,
            seed: int) -> None:
    """Print the cosine-to-fp32 table and the batch-invariance table (over a seeded subset of batch_n passages)."""
    lengths = list(map(len, seqs))
    sub = sorted(random.Random(seed).sample(range(len(seqs)), batch_n))
    sub_seqs = [seqs[i] for i in sub]
    vecs, shifts = {}, {}
    for name, path in models.items():
        sess = session(path, threads)
        vecs[name] = embed(sess, seqs, [[i] for i in range(len(seqs))])
        for label, batches in ((f"by length, {batch}", groups([lengths[i] for i in sub], batch)),
                               (f"random, {batch}", groups([lengths[i] for i in sub], batch, random.Random(seed)))):
            got, ref = embed(sess, sub_seqs, batches), vecs[name][sub]
            shifts[name, label] = (float(np.abs(ref - got).max()), float(np.sum(ref * got, 1).min()))
    print(f"\ncosine to fp32 (batch 1), min / mean per corpus; tokens per passage median "
          f"{int(np.median(lengths))}, max {max(lengths)}")
    print(f"{'graph':<24}" + "".join(f"{c + f' (n={corpus.count(c)})':>26}" for c in CORPORA))
    for name in models:
        cos = np.sum(vecs[name] * vecs["fp32"], axis=1)
        cells = [cos[[i for i, c in enumerate(corpus) if c == k]] for k in CORPORA]
        print(f"{name:<24}" + "".join(f"{x.min():>16.5f} / {x.mean():.5f}" for x in cells))
    print(f"\na passage alone vs inside a batch ({batch_n} passages): max abs difference, min cosine")
    for (name, label), (diff, cos) in shifts.items():
        print(f"{name:<24}{label:<16}{diff:>12.3g}{cos:>14.9f}")


def speed(models: dict[str, str], seqs, threads: list[int], batches: list[int], repeats: int, int8: str) -> None:
    """Print ms per passage and passages/s per graph, threads and batch size (medians over interleaved repeats)."""
    lengths = list(map(len, seqs))
    configs = []
    for name, path in models.items():
        for t in threads:
            sess = session(path, t)
            for b in [1] if name == int8 else batches:
                plan = groups(lengths, b)
                run(sess, [seqs[i] for i in plan[-1]])  # warm: the longest batch sizes the arena
                configs.append((name, t, b, sess, plan))
    times = {c[:3]: [] for c in configs}
    for _ in range(repeats):
        for name, t, b, sess, plan in configs:
            start = time.perf_counter()
            for idx in plan:
                run(sess, [seqs[i] for i in idx])
            times[name, t, b].append((time.perf_counter() - start) * 1000 / len(seqs))
    print(f"\nspeed over {len(seqs)} passages (tokens median {int(np.median(lengths))}, mean "
          f"{statistics.mean(lengths):.0f}), median of {repeats} interleaved repeats")
    print(f"{'graph':<24}{'threads':>8}{'batch':>6}{'padded/real':>12}{'ms/passage':>12}{'min-max':>14}{'passages/s':>12}")
    for (name, t, b), ms in times.items():
        med = statistics.median(ms)
        pad = sum(len(idx) * max(lengths[i] for i in idx) for idx in groups(lengths, b)) / sum(lengths)
        print(f"{name:<24}{t:>8}{b:>6}{pad:>12.2f}{med:>12.2f}{f'{min(ms):.1f}-{max(ms):.1f}':>14}{1000 / med:>12.1f}")


def graph_ops(path: str) -> None:
    """Print the operator counts of the graph ONNX Runtime runs after its optimisations, and what feeds each Add."""
    import collections
    import tempfile

    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as d:
        so = ort.SessionOptions()
        so.optimized_model_filepath = os.path.join(d, "opt.onnx")
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        m = onnx.load(so.optimized_model_filepath)
    ops = collections.Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in m.graph.node)
    print(f"{path}: {len(m.graph.node)} nodes after ONNX Runtime's optimisations")
    for op, c in ops.most_common():
        print(f"  {op:<40}{c:>5}")
    producer = {o: n.op_type for n in m.graph.node for o in n.output}
    inits = {t.name for t in m.graph.initializer}
    adds = collections.Counter("+".join(sorted("const" if i in inits else producer.get(i, "graph input") for i in n.input))
                               for n in m.graph.node if n.op_type == "Add")
    print(f"  Add nodes by what feeds them: {dict(adds)}")
    nbits = [n for n in m.graph.node if n.op_type == "MatMulNBits"]
    if nbits:
        print(f"  MatMulNBits with a bias input (an Add folded in): {sum(len(n.input) > 5 and n.input[5] != '' for n in nbits)}"
              f" of {len(nbits)}")


def main() -> None:
    """Convert, measure or show the graph, as the command line says."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="fp32 graph -> MatMulNBits (8-bit) graph")
    c.add_argument("--src", required=True)
    c.add_argument("--dst", required=True)
    c.add_argument("--block", type=int, choices=(16, 32, 64, 128, 256), default=32)
    c.add_argument("--asym", action="store_true", help="min/max per block with a zero point (default: symmetric)")
    c.add_argument("--accuracy", type=int, choices=(0, 1, 2, 3, 4), default=4,
                   help="accuracy_level: 4 quantises activations to int8 at run time, 0 computes in fp32")
    m = sub.add_parser("measure", help="quality, batch invariance and speed tables")
    m.add_argument("--fp32", required=True)
    m.add_argument("--int8", required=True, help="the served per-tensor dynamic int8 graph (timed at batch 1)")
    m.add_argument("--nbits", nargs="+", required=True)
    m.add_argument("--n", type=int, nargs=3, default=[300, 200, 200], metavar=("NQ", "CRAN", "CACM"))
    m.add_argument("--tokenizer", default="../models/bge-small-en-v15/tokenizer.json")
    m.add_argument("--data", default="../data")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--tables", nargs="+", choices=("quality", "speed"), default=["quality", "speed"])
    m.add_argument("--batch", type=int, default=16, help="batch size of the batch-invariance table")
    m.add_argument("--batch-n", type=int, default=160, help="passages of the batch-invariance table")
    m.add_argument("--threads", type=int, default=2, help="intra-op threads of the quality tables")
    m.add_argument("--speed-n", type=int, default=96, help="passages timed (a seeded subset of those drawn)")
    m.add_argument("--speed-threads", type=int, nargs="+", default=[1, 2])
    m.add_argument("--speed-batches", type=int, nargs="+", default=[1, 8, 16, 32])
    m.add_argument("--repeats", type=int, default=5)
    gr = sub.add_parser("graph", help="operator counts after ONNX Runtime's graph optimisations")
    gr.add_argument("--model", required=True)
    a = p.parse_args()

    if a.cmd == "convert":
        model, worst = convert(onnx.load(a.src), a.block, a.asym, a.accuracy)
        onnx.save(model, a.dst)
        n = sum(x.op_type == "MatMulNBits" for x in model.graph.node)
        print(f"{a.dst}: {n} MatMul -> MatMulNBits (bits 8, block {a.block}, {'asym' if a.asym else 'sym'}, "
              f"accuracy_level {a.accuracy}); largest weight error {worst:.2e} of its matrix's max |w|; "
              f"{os.path.getsize(a.dst) / 2**20:.1f} MiB")
    elif a.cmd == "graph":
        graph_ops(a.model)
    else:
        import onnxruntime

        drawn = passages(a.data, a.n, a.seed)
        tok = WordPiece(a.tokenizer)
        seqs = [tok.encode(text) for _, text in drawn]
        int8 = "int8 served"
        models = {"fp32": a.fp32, int8: a.int8} | {os.path.basename(x).removesuffix(".onnx"): x for x in a.nbits}
        print(f"onnxruntime {onnxruntime.__version__}; " + "; ".join(
            f"{k} {v} {os.path.getsize(v) / 2**20:.1f} MiB" for k, v in models.items()))
        if "quality" in a.tables:
            quality(models, seqs, [c for c, _ in drawn], a.threads, a.batch, a.batch_n, a.seed)
        if "speed" in a.tables:
            pick = random.Random(a.seed).sample(range(len(seqs)), a.speed_n)
            speed(models, [seqs[i] for i in pick], a.speed_threads, a.speed_batches, a.repeats, int8)


if __name__ == "__main__":
    main()
