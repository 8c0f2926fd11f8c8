"""The paper's recipe (icicle.fixtures) runs every stage in order, evaluates after each and checkpoints each (on a
micro model, seconds); a checkpoint becomes a model directory (icicle.export dir)."""
import json
import os
from dataclasses import replace

import pytest
import torch

from icicle import fixtures
from icicle.configs import StageConfig, get_config
from icicle.decode import Trie
from icicle.model import Decoder, ModelConfig
from icicle.negatives import RandomNegatives
from icicle.train import Corpus, docid_vocab, eval_serve, select_corpus

MICRO = ModelConfig(vocab_size=49153, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=64,
                    max_context_tokens=384)


@pytest.mark.slow
def test_train_runs_all_stages_and_checkpoints(tok, split, tmp_path):
    one = StageConfig(1, 1e-2, 8)
    cfg = replace(get_config("tiny"), model=MICRO, n_seen_docs=8, eval_instances=3, stage0=one, stage1=one,
                  stage2=one, stage3=one, dpo_max_pairs=8, k_choices=(5,), stage3_instances=8)
    c = select_corpus(split, cfg)
    c = Corpus(c.seen, c.train_queries[:6], c.docs, c.copy_queries[:6])
    report, times = {}, {}
    fixtures._train(Decoder(MICRO), tok, split, c, cfg, Trie.build(c.seen, tok.encode, tok.end_id),
                    RandomNegatives(c.seen), docid_vocab(tok, split.d_train), report, times, str(tmp_path),
                    lambda s: None, 0)
    for st in fixtures.STAGES:
        assert os.path.exists(tmp_path / f"{st}.pt") and f"{st}_s" in times
        assert f"{st}_icl" in report and f"{st}_parametric_trainq" in report
    assert "stage2_title_only" in report and "stage3_title_only" in report
    assert report["stage2"]["mined"]["pairs"] > 0
    assert (tmp_path / "train_metrics.json").exists()


def test_eval_serve_reports_the_serve_view(tok, split):
    """eval_serve (the per-stage serve-like evaluation, through serve_eval.serve_table) reports every field in
    range, with the gold's and the copy pick's positions over the queries that had the gold in the prompt."""
    cfg = replace(get_config("small"), model=MICRO, max_prompt_tokens=384)
    out = eval_serve(Decoder(MICRO), tok, cfg, split, Trie.build(split.d_train[:20], tok.encode, tok.end_id), 4, ns=(5,))
    r = out["n5"]
    assert r["n"] == 4
    for k in ("hits@1", "bm25_hits@1", "gold_in_prompt", "copy_pick", "route_copy_rate"):
        assert 0 <= r[k] <= 1, (k, r[k])
    assert sum(r["gold_pos"].values()) == round(r["gold_in_prompt"] * 4)
    assert all(1 <= pos <= 5 for pos in r["gold_pos"]) and all(1 <= pos <= 5 for pos in r["pick_pos"])
    # the rank prior: weight 0 is the model alone; a huge weight is BM25's order (the gold at [1])
    fused, gin = r["copy_pick_with_rank_prior"], sum(r["gold_pos"].values())
    assert fused["0.0"] == r["copy_pick"]
    assert fused["100.0"] == r["gold_pos"].get(1, 0) / max(1, gin)


def test_fixtures_reject_a_swap_share_outside_0_1(tmp_path):
    with pytest.raises(SystemExit, match="--swap-titles: a share from 0 to 1, got 1.5"):
        fixtures.main(["--config", "tiny", "--out", str(tmp_path / "m"), "--swap-titles", "1.5"])
    assert not (tmp_path / "m").exists()  # nothing written


def test_export_dir_writes_a_checkpoint_as_a_model_directory(tmp_path):
    """icicle.export dir (how a reader run's or a delta's weights become a model directory): the checkpoint's weights
    behind the graph, its metrics at the head of train_report.json, the caps it trained with in the manifest."""
    from icicle.configs import get_config
    from icicle.export import checkpoint, main

    cfg = get_config("tiny")
    torch.manual_seed(3)
    model = Decoder(cfg.model)
    work, out = tmp_path / "work", tmp_path / "m"
    work.mkdir()
    checkpoint(model, str(work), "stage3", {"config": "tiny", "reader": {"budget": 384}, "steps": 7}, {"train_s": 1.5})
    main(["dir", "--config", "tiny", "--work", str(work), "--out", str(out), "--summary-tokens", "16"])
    report = json.loads((out / "train_report.json").read_text())
    assert report["steps"] == 7 and report["reader"] == {"budget": 384} and report["times"]["train_s"] == 1.5
    assert report["seen_docs"] == cfg.n_seen_docs and report["device"] == "cpu"
    assert report["parity"]["fp32_max_abs"] < 1e-4, "the graph holds the checkpoint's weights, not a fresh init"
    assert report["golden"]["decode"] > 0 and (out / "golden" / "decode.jsonl").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["max_summary_tokens"] == 16 and manifest["config"] == "tiny"
    assert (out / "model.onnx").exists() and (work / "model.int8.onnx").exists(), "tiny ships its fp32 graph"
