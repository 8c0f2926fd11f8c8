"""ICICLE training side: the reader pipeline that made the shipped readers, the paper's recipe that makes the test
fixtures, ONNX export, reference decoding, golden vectors, evaluation.

Run from training/ with the venv of scripts/pyenv.sh, e.g. ``python -m icicle.reader train --set SET --work W``.
The model directories it writes follow inference/MODEL_FORMAT.md; training/README.md says which modules, in which
order, made each model in models/.

The reader pipeline, in the order of its recipe:
    data, tokenizer, prompt, compress       the split, [COPY], the prompt and its budget rule, the summaries
    encoder, readerdata                     the first stage's dense encoder; the reader set (first-stage lists, teacher)
    model, backbone, gguf_weights, decode   the decoder, pretrained weights, routed trie-constrained beam search
    configs, device, train, reader          training the reader on the set (reader: instances, losses, runs)
    export, delta, graft, int8, golden      a checkpoint as a model directory; shipped as a delta from its backbone
    metrics, serve_eval, evaluate           Hits@k and MRR@10; the serve-like evaluation; the paper's N-shot tables
The paper's recipe (models/tiny, models/small):
    contexts, negatives, align, stages      in-context candidates and negatives; stages 0-3, one per command
    fixtures                                all of it in one command
Research tools (experiments, diagnostics, the HF speed baseline) are in icicle.lab, which imports these modules and
is never imported by them (tests/test_structure.py).
"""
