"""The first stage's dense encoder in Python: the reference the Go encoder (inference/dense) is checked against.

An encoder directory (`models/bge-small-en-v15-q`, fetched by `scripts/encoder.sh`) holds `encoder.json`, the ONNX
graph and `tokenizer.json`. This module embeds text the way the manifest says, with the Python tokenizers library's
own truncation (the Go side truncates by hand) and ONNX Runtime, and writes the golden vectors that
`inference/loader`'s parity test replays:

    python -m icicle.encoder golden --dir ../models/bge-small-en-v15-q
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

# Inputs that exercise the Go side's rules: the query prefix, a passage longer than 512 tokens (truncation),
# accents and CJK (the BERT normaliser), a title-only passage, and batches of mixed length (padding).
GOLDEN_QUERIES = [
    "who sang the theme song for the office",
    "what similarity laws must be obeyed when constructing aeroelastic models of heated high speed aircraft .",
    "Café Müller — 東京 naïve résumé?",
]
GOLDEN_PASSAGES = [
    "The Office (U.S. TV series)\nThe Office is an American mockumentary sitcom television series.",
    "Title only",
    "Aeroelastic models\n" + " ".join(["the heated wing deforms under load and the flutter speed falls"] * 60),
    "Crème brûlée\nA dessert of rich custard topped with hardened caramelised sugar. 焦糖布丁",
]


def load(dir_: str, threads: int = 2):
    import onnxruntime as ort
    from tokenizers import Tokenizer

    with open(os.path.join(dir_, "encoder.json")) as f:
        man = json.load(f)
    tok = Tokenizer.from_file(os.path.join(dir_, man["tokenizer"]))
    tok.enable_truncation(man["max_tokens"])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(os.path.join(dir_, man["onnx"]), so)
    return man, tok, sess


def embed(man, tok, sess, texts: list[str], batch: int = 16) -> np.ndarray:
    """Vectors of texts (prefixes already applied), one row each, pooled and normalised as the manifest says."""
    encs = tok.encode_batch(texts)
    out = np.zeros((len(texts), man["dims"]), np.float32)
    for start in range(0, len(texts), batch):
        idx = list(range(start, min(start + batch, len(texts))))
        n = max(len(encs[i].ids) for i in idx)
        ids = np.full((len(idx), n), man["pad_id"], np.int64)
        mask = np.zeros_like(ids)
        for r, i in enumerate(idx):
            e = encs[i].ids
            ids[r, : len(e)] = e
            mask[r, : len(e)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if man.get("token_type_ids"):
            feed["token_type_ids"] = np.zeros_like(ids)
        h = sess.run(["last_hidden_state"], feed)[0]
        if man["pooling"] == "cls":
            v = h[:, 0]
        else:
            v = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        if man.get("normalize"):
            v = v / np.linalg.norm(v, axis=1, keepdims=True)
        out[idx] = v
    return out


def golden(dir_: str) -> dict:
    man, tok, sess = load(dir_)
    queries = [man["query_prefix"] + q for q in GOLDEN_QUERIES]
    passages = [man["passage_prefix"] + p for p in GOLDEN_PASSAGES]
    return {
        "encoder": man["name"],
        "reference": "training/icicle/encoder.py (tokenizers truncation, onnxruntime)",
        "queries": [{"text": q, "ids": tok.encode(man["query_prefix"] + q).ids, "vector": v.tolist()}
                    for q, v in zip(GOLDEN_QUERIES, embed(man, tok, sess, queries, batch=1))],
        "passages": [{"text": p, "ids": tok.encode(man["passage_prefix"] + p).ids, "vector": v.tolist()}
                     for p, v in zip(GOLDEN_PASSAGES, embed(man, tok, sess, passages, batch=man.get("max_batch") or 2))],
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m icicle.encoder", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("golden", help="write DIR/golden.json: vectors of fixed queries and passages")
    g.add_argument("--dir", required=True, help="encoder directory (encoder.json, its graph and tokenizer)")
    a = ap.parse_args(argv)
    out = golden(a.dir)
    path = os.path.join(a.dir, "golden.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(out['queries'])} queries, {len(out['passages'])} passages")


if __name__ == "__main__":
    main()
