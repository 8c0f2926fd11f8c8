"""Research tools, not the reader pipeline: reading experiments, diagnostics and the GENRE-style speed baseline.

    python -m icicle.lab.experiment --name f2 --prompt-format 2 --minutes 7   # a time-boxed reading experiment
    python -m icicle.lab.diagnose serve --model-dir ../models/small           # copy pick by the gold's BM25 position
    python -m icicle.lab.hf_baseline verify                                   # HF generate on the same weights
    python -m icicle.lab.runprofile ../models/reader135/model.onnx --past 3692  # one Run's time by operator
    python -m icicle.lab.attention --past 3692 --rows 38                      # the attention's methods, timed
    python -m icicle.lab.scorefusion fit ../.run/fusion/r135.jsonl            # first stage + w x reader, fitted
    python -m icicle.lab.querylikelihood fit ../.run/ql/train.scored.jsonl   # first stage + w x log P(query | doc)

They import the pipeline's modules (``icicle.*``); none of those imports them (tests/test_structure.py).
"""
