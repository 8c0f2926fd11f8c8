"""icicle.golden for a block reader's directory (python -m icicle.delta golden): the decode cases follow the
manifest's template and routes, and a length-scaled graph gets a case long enough to scale; and the int8 file is
made without PyTorch (icicle.int8, as scripts/model.sh does for models/b7)."""
import json
import os
import shutil
import subprocess
import sys

import torch

from icicle.configs import get_config
from icicle.export import export_onnx, ort_session
from icicle.golden import decode_cases
from icicle.model import Decoder
from icicle.prompt import TEMPLATE_BLOCKS

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_copy_only_block_template_and_a_long_case(tmp_path, tok, split):
    torch.manual_seed(0)
    c = get_config("tiny").model
    model = Decoder(c).eval()
    model.set_length_ref(100)  # short enough that the long case is scaled, the others partly
    path = str(tmp_path / "model.onnx")
    export_onnx(model, path)
    seen = sorted(split.d_train)[:50]
    cases = decode_cases(tok, split, seen, ort_session(path), model, c.layers, c.kv_heads, c.head_dim, 24, 2,
                         template=TEMPLATE_BLOCKS, recall=[], long_budget=1024)
    assert len(cases) == 21, "20 with candidates (no case without: a copy-only model has nothing to answer it) + 1 long"
    for case in cases:
        text = tok.tk.decode(case["prompt_ids"], skip_special_tokens=False)
        assert "[1] " not in text and "- " in text, "the block template: no per-request [i]"
        assert case["p_copy"] == 1.0 and {b["route"] for b in case["beams"]} == {"copy"}, "copy route only"
    long = cases[-1]
    assert len(long["candidates"]) == 60 and 512 < len(long["prompt_ids"]) <= 1024


def test_int8_without_torch(tmp_path):
    src = os.path.join(ROOT, "models", "tiny")
    d = tmp_path / "tiny"
    d.mkdir()
    for name in ("manifest.json", "model.onnx"):
        shutil.copy(os.path.join(src, name), d / name)
    m = json.loads((d / "manifest.json").read_text())
    m.pop("onnx_quantized", None)
    m.pop("int8_weight_bits", None)
    (d / "manifest.json").write_text(json.dumps(m))
    code = ("import sys; sys.modules['torch'] = None\n"
            f"from icicle import int8\nint8.main(['--model', {str(d)!r}, '--head'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=os.path.join(ROOT, "training"), capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["int8_head"] is True
    m = json.loads((d / "manifest.json").read_text())
    assert m["onnx_quantized"] == "model.int8.onnx" and m["int8_weight_bits"] == 7
    assert m["int8_head"] is True, "the manifest says the head is int8 (the Go manifest's int8_head)"
    assert (d / "model.int8.onnx").stat().st_size > 0
