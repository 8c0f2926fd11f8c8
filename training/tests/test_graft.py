"""icicle.graft: the committed reader135 graph is rebuilt from its delta and the wheel without PyTorch, and the
rebuilt graph reproduces the golden logits."""
import json
import os
import shutil
import subprocess
import sys

import onnx
import pytest

from icicle import graft

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
R135 = os.path.join(ROOT, "models", "reader135")


def test_every_initializer_of_the_graph_is_a_known_weight():
    m = onnx.load(os.path.join(R135, "graph.onnx"))
    src = graft.weight_sources(m.graph)
    assert set(src) == {i.name for i in m.graph.initializer}
    names = {w for w, _ in src.values()}
    assert "embed_tokens.weight" in names and "layers.29.mlp.down_proj.weight" in names
    assert all(len(i.raw_data) == 0 for i in m.graph.initializer), "the committed graph carries no weights"
    with open(os.path.join(R135, "graph.json")) as f:
        assert json.load(f)["backbone_keep"] == list(range(30))


@pytest.mark.slow  # a minute: the 539 MB build again (scripts/model.sh builds it with the same code in make test)
def test_build_without_torch(tmp_path):
    d = tmp_path / "reader135"
    d.mkdir()
    for name in ("graph.onnx", "graph.json", "delta.safetensors"):
        shutil.copy(os.path.join(R135, name), d / name)
    shutil.copytree(os.path.join(R135, "golden"), d / "golden")
    # torch is made unimportable in the child: the build must not need it.
    code = ("import sys; sys.modules['torch'] = None\n"
            "from icicle import graft\nfrom icicle.tokenizer import gguf_path\n"
            f"print(graft.build({str(d)!r}, gguf_path()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=os.path.join(ROOT, "training"), capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (d / "model.onnx").stat().st_size > 500e6
    assert "golden_logits_max_abs" in out.stdout


def test_check_refuses_another_model(tmp_path):
    golden = tmp_path / "logits.jsonl"
    with open(os.path.join(R135, "golden", "logits.jsonl")) as f:
        rows = [json.loads(line) for line in f][:1]
    rows[0]["last_logits_top"] = [[t, v + 1.0] for t, v in rows[0]["last_logits_top"]]
    golden.write_text(json.dumps(rows[0]) + "\n")
    model = os.path.join(R135, "model.onnx")
    if not os.path.exists(model):
        pytest.fail(f"{model} missing: run scripts/model.sh models/reader135")
    with pytest.raises(SystemExit, match="golden logits"):
        graft.check(model, str(golden))


def test_model_sh_leaves_a_landed_directory_as_it_is(tmp_path):
    """training/gpu/land.sh writes model.onnx and a delta but no graph.onnx, and stamps the delta's hash: model.sh
    (which block-model.sh runs first) must take that as built, not fail hashing the missing graph (session 23)."""
    import hashlib

    d = tmp_path / "landed"
    d.mkdir()
    (d / "manifest.json").write_text("{}\n")
    (d / "delta.safetensors").write_bytes(b"a delta")
    (d / "model.onnx").write_bytes(b"a graph built from it")
    (d / "model.onnx.delta-sha256").write_text(hashlib.sha256(b"a delta").hexdigest() + "\n")
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "model.sh"), str(d)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert "building" not in p.stderr
    assert (d / "model.onnx").read_bytes() == b"a graph built from it"
