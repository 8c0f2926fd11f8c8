"""ICICLE training side: data split, SFT stages, ONNX export, reference decoding, golden vectors.

Run from training/ with the venv of scripts/pyenv.sh, e.g. ``python -m icicle.pipeline --config tiny --out DIR``.
The model directory it writes follows inference/MODEL_FORMAT.md.
"""
