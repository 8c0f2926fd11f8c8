# Stand-in model directory for checking inference/ort and inference/tok before (or without) the real
# fixture from training/: a 2-layer, 2-kv-head, head_dim 32 decoder with tree attention that follows
# MODEL_FORMAT.md (learned position embeddings instead of RoPE), a small byte-level BPE tokenizer with
# [COPY] as an added special token, and golden/tokenize.jsonl + golden/logits.jsonl computed with the
# Python onnxruntime and tokenizers packages. Not used by committed tests; a developer tool:
#
#   python3 -m venv /tmp/v && /tmp/v/bin/pip install onnx onnxruntime tokenizers numpy
#   /tmp/v/bin/python inference/ort/testdata/standin_model.py /tmp/standin
#   eval "$(scripts/env.sh)"; ICICLE_MODEL_DIR=/tmp/standin go test -tags "ort tokenizers" ./inference/...
import json, os, sys
import numpy as np
import onnx
from onnx import helper as h, TensorProto as TP, numpy_helper as nh

out = sys.argv[1]
os.makedirs(out + "/golden", exist_ok=True)
V, H, L, KV, D = 300, 64, 2, 2, 32
rng = np.random.default_rng(0)
inits, nodes = [], []
def W(name, *shape, s=0.2):
    inits.append(nh.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)); return name
def C(name, arr):
    inits.append(nh.from_array(np.array(arr), name)); return name
def N(op, ins, outs, **kw):
    nodes.append(h.make_node(op, ins, outs, **kw)); return outs[0]

C("shape_kv", np.array([1, -1, KV, D], np.int64))
C("shape_h", np.array([1, -1, KV * D], np.int64))
C("axes1", np.array([1], np.int64))
C("scale", np.array(1.0 / np.sqrt(D), np.float32))
W("emb", V, H, s=1.0); W("pos", 4096, H, s=0.5)
x = N("Add", [N("Gather", ["emb", "input_ids"], ["e"]), N("Gather", ["pos", "position_ids"], ["p"])], ["x0"])
mask4 = N("Unsqueeze", ["attention_mask", "axes1"], ["mask4"])
inputs = [h.make_tensor_value_info("input_ids", TP.INT64, [1, "n"]),
          h.make_tensor_value_info("position_ids", TP.INT64, [1, "n"]),
          h.make_tensor_value_info("attention_mask", TP.FLOAT, [1, "n", "t"]),
          h.make_tensor_value_info("logits_index", TP.INT64, ["m"])]
outputs = [h.make_tensor_value_info("logits", TP.FLOAT, [1, "m", V])]
for l in range(L):
    inputs += [h.make_tensor_value_info(f"past_key_values.{l}.{kv}", TP.FLOAT, [1, "past", KV, D]) for kv in ("key", "value")]
    outputs += [h.make_tensor_value_info(f"present.{l}.{kv}", TP.FLOAT, [1, "n", KV, D]) for kv in ("key", "value")]
    k = N("Reshape", [N("MatMul", [x, W(f"wk{l}", H, KV * D)], [f"k{l}"]), "shape_kv"], [f"present.{l}.key"])
    v = N("Reshape", [N("MatMul", [x, W(f"wv{l}", H, KV * D)], [f"v{l}"]), "shape_kv"], [f"present.{l}.value"])
    K = N("Concat", [f"past_key_values.{l}.key", k], [f"K{l}"], axis=1)
    Vv = N("Concat", [f"past_key_values.{l}.value", v], [f"V{l}"], axis=1)
    q = N("Transpose", [N("Reshape", [N("MatMul", [x, W(f"wq{l}", H, KV * D)], [f"q{l}"]), "shape_kv"], [f"qr{l}"])], [f"qt{l}"], perm=[0, 2, 1, 3])
    Kt = N("Transpose", [K], [f"Kt{l}"], perm=[0, 2, 3, 1])
    s = N("Add", [N("Mul", [N("MatMul", [q, Kt], [f"s0{l}"]), "scale"], [f"s1{l}"]), mask4], [f"s{l}"])
    a = N("Softmax", [s], [f"a{l}"], axis=-1)
    o = N("MatMul", [a, N("Transpose", [Vv], [f"Vt{l}"], perm=[0, 2, 1, 3])], [f"o{l}"])
    o = N("Reshape", [N("Transpose", [o], [f"ot{l}"], perm=[0, 2, 1, 3]), "shape_h"], [f"oh{l}"])
    x = N("Add", [x, N("MatMul", [o, W(f"wo{l}", KV * D, H)], [f"op{l}"])], [f"xa{l}"])
    f = N("MatMul", [N("Tanh", [N("MatMul", [x, W(f"w1{l}", H, 128)], [f"f1{l}"])], [f"f2{l}"]), W(f"w2{l}", 128, H)], [f"f3{l}"])
    x = N("Add", [x, f], [f"x{l+1}"])
hsel = N("Gather", [x, "logits_index"], ["hsel"], axis=1)
N("MatMul", [hsel, W("lm", H, V)], ["logits"])
g = h.make_graph(nodes, "tiny", inputs, outputs, inits)
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)]); m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, out + "/model.onnx")

# tokenizer: a small BPE trained on a few lines, with [COPY] as an added special token
from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
corpus = ["System: Given a query and a list of candidate documents, retrieve the title.",
          "Candidates:", "Title: Barack Obama", "Query: who wrote the iliad", "Output:",
          "The Iliad is an ancient Greek epic poem attributed to Homer."] * 20
tr = trainers.BpeTrainer(vocab_size=V - 1, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(corpus, tr)
tok.add_special_tokens(["[COPY]"])
tok.save(out + "/tokenizer.json")
texts = ["Title: Barack Obama\n", "[COPY]Homer", "héllo wörld ✓ 日本", "", "  leading and trailing  ", "Query: who wrote the iliad\nOutput:\n[COPY]The Iliad<|endoftext|>"]
with open(out + "/golden/tokenize.jsonl", "w") as fh:
    for t in texts:
        fh.write(json.dumps({"text": t, "ids": tok.encode(t, add_special_tokens=False).ids}, ensure_ascii=False) + "\n")
copy_id = tok.token_to_id("[COPY]")

import onnxruntime as ort
sess = ort.InferenceSession(out + "/model.onnx")
with open(out + "/golden/logits.jsonl", "w") as fh:
    for n in (1, 7, 33):
        ids = rng.integers(0, V, n).astype(np.int64)
        feed = {"input_ids": ids[None], "position_ids": np.arange(n, dtype=np.int64)[None],
                "attention_mask": np.triu(np.full((n, n), -1e9, np.float32), 1)[None],
                "logits_index": np.array([n - 1], np.int64)}
        for l in range(L):
            for kv in ("key", "value"):
                feed[f"past_key_values.{l}.{kv}"] = np.zeros((1, 0, KV, D), np.float32)
        logits = sess.run(["logits"], feed)[0][0, -1]
        top = np.argsort(-logits)[:10]
        fh.write(json.dumps({"input_ids": ids.tolist(), "last_logits_top": [[int(i), float(logits[i])] for i in top]}) + "\n")
man = {"format_version": 1, "name": "gen-tiny", "config": "tiny", "onnx": "model.onnx", "tokenizer": "tokenizer.json",
       "seen_docids": "seen_docids.txt", "vocab_size": V, "num_layers": L, "num_kv_heads": KV, "head_dim": D,
       "kv_dtype": "float32", "max_context_tokens": 4096, "copy_token_id": copy_id, "end_token_id": 0}
json.dump(man, open(out + "/manifest.json", "w"), indent=1)
open(out + "/seen_docids.txt", "w").write("Barack Obama\nHomer\n")
print("ok", out, "copy", copy_id, "vocab", tok.get_vocab_size())
