"""ICICLE training side: data split, SFT stages, ONNX export, reference decoding, golden vectors.

Run from training/ with the venv of scripts/pyenv.sh, e.g. ``python -m icicle.pipeline --config tiny --out DIR``.
The model directory it writes follows inference/MODEL_FORMAT.md.

The pipeline, in the order of the recipe:
    data, tokenizer, prompt                 the split, [COPY], the prompt and its budget rule
    contexts, negatives, compress           in-context candidates and their summaries
    model, backbone, gguf_weights, decode   the decoder, pretrained weights, routed trie-constrained beam search
    configs, device, train, align, stages   stage 0 and 1 (train), 2 and 3 (align), one stage per command (stages)
    export, int8, delta, graft              ONNX, int8 (torch-free), manifest; a model as a delta from its backbone
    golden, encoder                         parity vectors for the Go side
    evaluate, serve_eval                    Hits@1 over N-shot conditions; the serve-like evaluation
    pipeline                                all of it in one command
Research tools (experiments, diagnostics, the HF speed baseline) are in icicle.lab, which imports the pipeline and
is never imported by it (tests/test_structure.py).
"""
