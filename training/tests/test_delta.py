"""icicle.delta: a fine-tune stored as the low-rank int8 difference from its base, and rebuilt from it."""
import pytest
import torch

from icicle.delta import pack, recut, unpack


def _weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"layers.0.mlp.up_proj.weight": torch.randn(48, 32, generator=g),
            "embed_tokens.weight": torch.randn(100, 32, generator=g),
            "norm.weight": torch.ones(32)}


def test_a_low_rank_change_comes_back_to_int8_precision():
    base = _weights(0)
    g = torch.Generator().manual_seed(1)
    tuned = {k: v.clone() for k, v in base.items()}
    low = torch.randn(48, 3, generator=g) @ torch.randn(3, 32, generator=g) * 0.01
    tuned["layers.0.mlp.up_proj.weight"] += low
    tuned["norm.weight"] += 0.125
    d = pack(tuned, base, rank=4)
    assert d["layers.0.mlp.up_proj.weight.a"].dtype == torch.int8 and d["layers.0.mlp.up_proj.weight.a"].shape == (48, 4)
    assert d["layers.0.mlp.up_proj.weight.b"].shape == (4, 32)
    back = unpack(d, base)
    err = (back["layers.0.mlp.up_proj.weight"] - tuned["layers.0.mlp.up_proj.weight"]).abs().max()
    assert err < 0.02 * low.abs().max()  # int8 factors: about 1 % of the change, not of the weight
    assert torch.equal(back["norm.weight"], tuned["norm.weight"])  # vectors whole (0.125 is exact in fp16)
    assert torch.allclose(back["embed_tokens.weight"], base["embed_tokens.weight"], atol=1e-6)  # unchanged stays


def test_the_rank_cut_keeps_the_largest_directions():
    base = _weights(0)
    g = torch.Generator().manual_seed(2)
    u, _ = torch.linalg.qr(torch.randn(48, 2, generator=g))
    v, _ = torch.linalg.qr(torch.randn(32, 2, generator=g))
    tuned = {k: w.clone() for k, w in base.items()}
    tuned["layers.0.mlp.up_proj.weight"] += 1.0 * u[:, :1] @ v[:, :1].T + 0.01 * u[:, 1:] @ v[:, 1:].T
    back = unpack(pack(tuned, base, rank=1), base)
    left = back["layers.0.mlp.up_proj.weight"] - tuned["layers.0.mlp.up_proj.weight"]
    assert 0.005 < left.norm() < 0.02  # only the small direction is lost


def test_a_recut_is_the_lower_rank_pack():
    base = _weights(0)
    g = torch.Generator().manual_seed(3)
    tuned = {k: w.clone() for k, w in base.items()}
    tuned["layers.0.mlp.up_proj.weight"] += torch.randn(48, 32, generator=g) * 0.01
    tuned["norm.weight"] += 0.25
    wide, narrow = pack(tuned, base, rank=8), pack(tuned, base, rank=3)
    again = recut(wide, 3)
    assert again["layers.0.mlp.up_proj.weight.a"].shape == (48, 3) and set(again) == set(narrow)
    w = "layers.0.mlp.up_proj.weight"
    a, b = unpack(again, base)[w], unpack(narrow, base)[w]
    cut = (unpack(narrow, base)[w] - tuned[w]).norm()
    assert (a - b).norm() < 0.05 * cut  # the same three directions, up to the int8 factors
    assert (unpack(recut(wide, 1), base)[w] - tuned[w]).norm() > cut  # fewer directions lose more
    assert torch.equal(unpack(again, base)["norm.weight"], tuned["norm.weight"])


def test_recut_only_lowers_the_rank(tmp_path):
    from safetensors.torch import save_file

    from icicle.delta import FORMAT, main

    base = _weights(0)
    src = tmp_path / "d.safetensors"
    save_file(pack(base, base, rank=4), str(src), metadata={"format": FORMAT, "rank": "4", "config": "reader135"})
    with pytest.raises(SystemExit, match="only lowers"):
        main(["recut", "--delta", str(src), "--rank", "4", "--out", str(tmp_path / "o.safetensors")])
    main(["recut", "--delta", str(src), "--rank", "2", "--out", str(tmp_path / "o.safetensors")])
    from safetensors import safe_open
    with safe_open(str(tmp_path / "o.safetensors"), "pt") as f:
        assert f.metadata()["rank"] == "2" and f.metadata()["recut_from"] == "4"
        assert f.get_tensor("layers.0.mlp.up_proj.weight.a").shape == (48, 2)


def test_names_must_match():
    base = _weights(0)
    with pytest.raises(ValueError, match="differ in names"):
        pack({**base, "extra.weight": torch.ones(2)}, base, rank=2)
    d = pack(base, base, rank=2)
    with pytest.raises(ValueError, match="differ in names"):
        unpack(d, {k: v for k, v in base.items() if k != "norm.weight"})


def _case(docid: str, score: float, prompt=(1, 2, 3)) -> dict:
    return {"prompt_ids": list(prompt), "beams": [{"docid": docid, "route": "copy", "score": score}]}


def test_same_decodes_accepts_float_noise_and_refuses_another_model(tmp_path):
    import json

    from icicle.delta import same_decodes

    def write(name, cases):
        p = tmp_path / name
        p.write_text("".join(json.dumps(c) + "\n" for c in cases))
        return str(p)

    committed = write("c.jsonl", [_case("Alpha", -0.5), _case("Beta", -1.0)])
    same_decodes(write("a.jsonl", [_case("Alpha", -0.5004), _case("Beta", -1.0)]), committed)
    for bad, why in (([_case("Alpha", -0.5), _case("Gamma", -1.0)], "case 1"),
                     ([_case("Alpha", -0.51), _case("Beta", -1.0)], "case 0"),
                     ([_case("Alpha", -0.5, (9,)), _case("Beta", -1.0)], "prompt differs"),
                     ([_case("Alpha", -0.5)], "2 golden cases")):
        with pytest.raises(SystemExit, match=why):
            same_decodes(write("b.jsonl", bad), committed)


def test_pack_refuses_a_rank_below_one():
    from icicle.delta import main

    with pytest.raises(SystemExit):
        main(["pack", "--work", "w", "--config", "reader135", "--rank", "0", "--out", "x"])


def test_a_reader_runs_summary_cap_and_budget_reach_the_export():
    from icicle.configs import get_config
    from icicle.delta import reader_caps

    cfg = get_config("reader135")
    assert reader_caps({"reader": {"summary_tokens": 64, "budget": 1024}}, cfg) == (64, 1024)
    # a run from before --summary-tokens: the config's 24 and 512, as it trained
    assert reader_caps({"reader": {"budget": 512}}, cfg) == (24, 512)
    assert reader_caps({"stage1_s": 3.0}, cfg) == (0, 0)  # a fixture's run: the config as it is


def test_negative_caps_are_refused(tmp_path, capsys):
    from icicle import export, fixtures
    from icicle.configs import get_config, with_caps

    for main, args in ((fixtures.main, ["--config", "tiny"]),
                       (export.main, ["dir", "--config", "tiny", "--work", "w"])):
        with pytest.raises(SystemExit):
            main([*args, "--out", str(tmp_path / "m"), "--summary-tokens", "-1"])
        assert "a number of tokens, or 0 for the config's; got -1" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
    with pytest.raises(ValueError, match="got 0, -5"):
        with_caps(get_config("tiny"), 0, -5)


def test_lengthscale_refuses_a_ref_below_two_and_a_directory_without_its_delta(tmp_path):
    from icicle.delta import main

    with pytest.raises(SystemExit, match="--ref 1: want at least 2 positions"):
        main(["lengthscale", "--model", str(tmp_path), "--ref", "1", "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="no delta.safetensors"):
        main(["lengthscale", "--model", str(tmp_path), "--ref", "800", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()  # nothing written


def test_golden_refuses_a_directory_without_its_graph_or_delta(tmp_path):
    from icicle.delta import main

    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(SystemExit, match="golden --model .*: no model.onnx"):
        main(["golden", "--model", str(tmp_path)])
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(SystemExit, match="no delta.safetensors"):
        main(["golden", "--model", str(tmp_path)])
    assert not (tmp_path / "golden").exists()  # nothing written


@pytest.mark.slow
def test_rebuild_is_the_committed_delta_on_the_backbone():
    """models/b7's golden logits (written from its fp32 graph) come back from rebuild(): the PyTorch model that
    `delta golden` and `delta lengthscale` start from is the delta's."""
    import json
    import os

    import numpy as np

    from icicle.decode import causal_mask_np, torch_step
    from icicle.delta import rebuild

    d = os.path.join(os.path.dirname(__file__), "..", "..", "models", "b7")
    model = rebuild(os.path.join(d, "delta.safetensors"), "reader135").eval()
    model.set_length_ref(json.load(open(os.path.join(d, "manifest.json")))["attention_length_ref"])
    with open(os.path.join(d, "golden", "logits.jsonl")) as f:
        g = json.loads(f.readline())
    n = len(g["input_ids"])
    ids, pos = np.asarray([g["input_ids"]], np.int64), np.arange(n, dtype=np.int64)[None]
    past = [p.numpy() for p in model.empty_past()]
    logits = torch_step(model)(ids, pos, causal_mask_np(0, n), np.asarray([n - 1], np.int64), past)[0][0, -1]
    for tok, val in g["last_logits_top"][:5]:
        assert abs(float(logits[tok]) - val) < 5e-3
