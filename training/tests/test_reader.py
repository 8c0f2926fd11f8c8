"""The reader set, the reader's instances and loss, a run that resumes, and the GPU queue's dry run (CPU, tiny set).

The set is built for real (bm25s, the int8 bge-small graph that scripts/encoder.sh fetched, the wheel's backbone),
at 300 documents."""
import gzip
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from icicle import reader, readerdata

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="module")
def rset(tmp_path_factory) -> str:
    if not os.path.exists(os.path.join(readerdata.ENCODER, "model.onnx")):
        pytest.fail(f"{readerdata.ENCODER}/model.onnx missing: run scripts/encoder.sh {readerdata.ENCODER}")
    out = tmp_path_factory.mktemp("rs")
    readerdata.build(str(out), limit_docs=300, threads=2, log=lambda *_: None)
    return str(out / "readerset.json.gz")


@pytest.fixture(scope="module")
def rd(rset):
    from icicle.tokenizer import Tok, build_tokenizer

    a = reader.Args(set=rset, work="", kd=0.5, shuffle=0.0, swap_titles=0.0)
    return reader.Reader(readerdata.load(rset), Tok(build_tokenizer()), a)


def test_a_shallower_set_holds_the_first_places_of_the_same_lists(rset, tmp_path):
    """--depth cuts each list of the first stage's order: the same question's list is a prefix of the deeper one's;
    --cache reads the deeper set's vectors (nothing embedded again: no vector written under the new set)."""
    logged = []
    readerdata.build(str(tmp_path), limit_docs=300, threads=2, log=logged.append, depth=6,
                     cache=os.path.join(os.path.dirname(rset), "cache"))
    assert not os.path.exists(tmp_path / "cache") and not [m for m in logged if m.startswith("embed")]
    short, deep = readerdata.load(str(tmp_path / "readerset.json.gz")), readerdata.load(rset)
    assert short["list_depth"] == 6 and deep["list_depth"] == readerdata.LIST_DEPTH
    by_q = {(q["q"], q["gold"], q["part"]): q for q in deep["questions"]}
    same = [(q, by_q[k]) for q in short["questions"] if (k := (q["q"], q["gold"], q["part"])) in by_q]
    assert len(same) > 100
    assert max(len(q["list"]) for q, _ in same) == 6
    for q, d in same:
        assert q["list"] == d["list"][: len(q["list"])] and len(q["list"]) == min(6, len(d["list"]))


def test_set_parts_never_mix(rset):
    from icicle.data import make_split

    rs = readerdata.load(rset)
    held = set(rs["heldout_docs"])
    seen = set(rs["seen"])
    d_train = set(make_split().d_train)
    others = 0  # held-out lists' documents that are not held out: the sidecar lists every unseen document
    kinds = {(q["kind"], q["part"]) for q in rs["questions"]}
    assert {("nq", "train"), ("syn", "train"), ("seen", "train"), ("nq", "heldout")} <= kinds
    for q in rs["questions"]:
        assert len(q["list"]) == len(q["cos"]) == len(q["fused"]) <= readerdata.LIST_DEPTH
        assert q["fused"] == sorted(q["fused"], reverse=True)  # the first stage's order
        if q["part"] == "heldout":
            assert q["gold"] in held and set(q["list"]) <= d_train and not set(q["list"]) & seen
            others += len(set(q["list"]) - held)
        else:
            assert not set(q["list"]) & held and q["gold"] not in held  # no held-out document is ever trained
        if q["kind"] == "seen":
            assert q["gold"] in seen and q["gold"] not in q["list"]  # a seen question's list never holds its gold
        if q["kind"] == "syn":  # the dense filter kept it: the encoder ranks its document first or second
            best = sorted(range(len(q["list"])), key=lambda r: -q["cos"][r])[:2]
            assert q["list"].index(q["gold"]) in best
    assert others, "held-out lists hold unseen training documents too, not the held-out ones alone"


def test_seen_heldout_lines_are_the_sets_untrained_seen_questions(rset):
    from icicle.data import load_beir

    rs = readerdata.load(rset)
    held = [q for q in rs["questions"] if q["part"] == "seen_heldout"]
    trained = {q["q"] for q in rs["questions"] if q["part"] == "train"}
    lines = readerdata.seen_heldout_queries(rs)
    assert held and len(lines) == len(held)
    _, queries = load_beir()
    by_qid = {q.qid: q for q in queries}
    for line, q in zip(lines, held):
        nq = by_qid[line["qid"]]  # a real nq_qed query, its gold the set's and a seen document
        assert (nq.query, nq.docid, line["split"]) == (q["q"], q["gold"], "train") and q["gold"] in rs["seen"]
        assert line["query"] not in trained
    # a set built from other data: named, not written short
    bad = {**rs, "questions": [{**held[0], "q": "a question nq_qed does not have"}]}
    with pytest.raises(ValueError, match="1 seen_heldout questions are not train queries"):
        readerdata.seen_heldout_queries(bad)


def test_reading_instance_places_the_gold_anywhere_and_teaches_by_first_token(rd):
    rng = random.Random(0)
    pos = []
    for _ in range(200):
        inst, (probs, first) = rd.reading_instance(rng)
        assert inst.answer[0] == rd.tok.copy_id
        assert abs(sum(probs) - 1) < 1e-4 and len(probs) == len(first)
        assert inst.answer[1] in first  # the gold's first title token is among the teacher's choices
        pos.append(first.index(inst.answer[1]) / max(1, len(first) - 1))
    # a gold the list missed takes a drawn place, so the last slot is not where it mostly sits
    assert sum(p == 1.0 for p in pos) < 0.5 * len(pos)


def test_seen_instances_answer_from_memory(rd):
    rng = random.Random(1)
    inst = rd.seen_instance(rng)
    assert inst.answer[0] != rd.tok.copy_id and inst.answer[-1] == rd.tok.end_id
    assert rd.index_instance(rng).answer[-1] == rd.tok.end_id


def test_teacher_term_adds_to_the_loss(rd):
    from icicle.model import Decoder, ModelConfig

    torch.manual_seed(0)
    m = Decoder(ModelConfig(vocab_size=49153, hidden=32, layers=1, heads=2, kv_heads=1, head_dim=16, intermediate=64,
                            max_context_tokens=1024))
    insts, teach = zip(*[rd.reading_instance(random.Random(i)) for i in range(3)])
    plain = reader.step_loss(m, rd.out_vocab, list(insts), list(teach), 0.0)
    with_kd = reader.step_loss(m, rd.out_vocab, list(insts), list(teach), 1.0)
    assert with_kd.item() > plain.item()  # a KL against a sharp teacher is positive for an untrained model
    with_kd.backward()
    assert m.embed_tokens.weight.grad is not None


def test_block_reading_instances_train_under_their_layout(rset):
    """--blocks: instances carry their prompt's segments in the block template, and the loss under the layout's
    mask and positions equals the one-sequence-at-a-time forward under decode.block_attention (the padding of the
    batch changes nothing) and differs from causal reading."""
    from icicle.decode import block_attention
    from icicle.model import Decoder, ModelConfig
    from icicle.tokenizer import Tok, build_tokenizer

    a = reader.Args(set=rset, work="", kd=0.0, shuffle=0.0, swap_titles=0.0, blocks="shared")
    rb = reader.Reader(readerdata.load(rset), Tok(build_tokenizer()), a)
    insts = [rb.reading_instance(random.Random(i))[0] for i in range(3)]
    assert all(i.segments and len(i.segments) >= 2 for i in insts)
    assert all(rb.tok.encode("[1]")[0] not in i.prompt[i.segments[0]:i.segments[1]][:2] for i in insts)
    torch.manual_seed(0)
    m = Decoder(ModelConfig(vocab_size=49153, hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64,
                            max_context_tokens=2048)).eval()
    with torch.no_grad():
        batched = reader.step_loss(m, rb.out_vocab, insts, [None] * 3, 0.0, "shared")
        one = []
        for inst in insts:
            ids = torch.tensor([inst.prompt + inst.answer[:-1]])
            att, pos = block_attention(inst.segments, ids.shape[1], "shared")
            gt = torch.arange(len(inst.prompt) - 1, ids.shape[1])
            z = m.train_logits(ids, torch.ones_like(ids, dtype=torch.bool), torch.zeros_like(gt), gt, rb.out_vocab,
                               layout=(torch.from_numpy(att)[None], torch.from_numpy(pos)[None]))
            one.append(torch.nn.functional.cross_entropy(z.float(), torch.searchsorted(rb.out_vocab,
                                                                                         torch.tensor(inst.answer))))
        causal = reader.step_loss(m, rb.out_vocab, insts, [None] * 3, 0.0)
    answer_tokens = [len(i.answer) for i in insts]
    want = sum(l * n for l, n in zip(one, answer_tokens)) / sum(answer_tokens)
    assert abs(batched.item() - want.item()) < 1e-4
    assert abs(batched.item() - causal.item()) > 1e-4


def test_summary_candidates_keep_the_first_stages_top_k_summaries(rset):
    """--summary-candidates 2: a candidate keeps its summary only when the first stage ranked it in its top 2,
    wherever the prompt puts it (shuffled lists)."""
    from icicle.tokenizer import Tok, build_tokenizer

    a = reader.Args(set=rset, work="", kd=0.0, blocks="shared", summary_candidates=2)
    rb = reader.Reader(readerdata.load(rset), Tok(build_tokenizer()), a)
    q = rb.reading[0]
    names = q["list"][:5]
    assert [k > 0 for k in rb.prompt(q["q"], names, {}).summary_tokens] == [True, True, False, False, False]
    order = [3, 0, 4, 1, 2]
    p = rb.prompt(q["q"], [q["list"][i] for i in order], {}, order)
    assert [k > 0 for k in p.summary_tokens] == [False, True, False, True, False]
    rb.a.summary_candidates = 0
    assert all(k > 0 for k in rb.prompt(q["q"], names, {}).summary_tokens)
    inst, _ = rb.reading_instance(random.Random(0))
    assert inst.segments


def _run(args, env=None, timeout=1200):
    p = subprocess.run(args, cwd=os.path.join(REPO, "training"), capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


@pytest.mark.slow
def test_run_resumes_where_it_stopped(rset, tmp_path):
    work = str(tmp_path / "w")
    base = [sys.executable, "-m", "icicle.reader", "train", "--set", rset, "--work", work, "--init", "backbone",
            "--batch", "2", "--n", "3", "--eval-n", "1", "--save-every", "1", "--device", "cpu", "--bf16", "false"]
    _run(base + ["--steps", "1"])
    # a run begun before an argument existed resumes under the argument's default
    run = json.load(open(os.path.join(work, "run.json")))
    del run["args"]["summary_candidates"]
    json.dump(run, open(os.path.join(work, "run.json"), "w"))
    # how often the C heap is trimmed is not part of the run: it resumes under another
    _run(base + ["--steps", "2", "--trim-above-gb", "0.001"])
    log = [json.loads(x) for x in open(os.path.join(work, "log.jsonl"))]
    assert any(r.get("resumed") and r["step"] == 1 for r in log)
    assert [r["step"] for r in log if r.get("final")] == [1, 2]
    assert os.path.exists(os.path.join(work, "stage3.pt"))
    p = subprocess.run(base[:-2] + ["--batch", "4", "--steps", "3"], cwd=os.path.join(REPO, "training"),
                       capture_output=True, text=True)
    assert p.returncode != 0 and "other arguments" in p.stderr + p.stdout  # a changed run needs a new WORK


@pytest.mark.slow
def test_gpu_queue_dry_run(rset, tmp_path):
    g, run, out = tmp_path / "gpu", tmp_path / "run", tmp_path / "out"
    env = {"ICICLE_GPU_DIR": str(g), "ICICLE_GPU_RUN": str(run), "OUT": str(out), "ICICLE_GPU_PYTHON": sys.executable,
           "ICICLE_VENV": os.path.dirname(os.path.dirname(sys.executable))}
    p = _run(["bash", "gpu/stage.sh", "--dir", str(g), "--keep-tree", "--set", rset, "--parts", "3"], env)
    assert sorted(os.listdir(g)) == ["p0", "p1", "p2", "set", "whl"]
    # the calls it prints carry every piece once, each call within the device tool's 64 MiB
    calls = [ln.split(" carries ")[1].rsplit(" (", 1)[0].split() for ln in p.stdout.splitlines() if " carries " in ln]
    assert sorted(x for c in calls for x in c) == sorted(str(g / x) for x in ["p0", "p1", "p2", "set", "whl"])
    for c in calls:
        assert sum(f.stat().st_size for x in c for f in [Path(x)] + list(Path(x).rglob("*")) if f.is_file()) < 64 << 20
    assert {w.split("-")[0] for w in os.listdir(g / "whl")} == {"gguf", "bm25s"}
    # A setsid that forks and exits at once (a fake, as the device's behaved in session 23): `wait` must still wait
    # for the job itself, or `collect` finds no finished run.
    fake = tmp_path / "fake_forking_setsid"
    fake.mkdir()
    (fake / "setsid").write_text('#!/bin/sh\n"$@" &\n')
    (fake / "setsid").chmod(0o755)
    _run(["bash", "gpu/job.sh", "--dry-run", "all"], {**env, "PATH": f"{fake}:{os.environ['PATH']}"})
    got = sorted(os.listdir(out))
    assert "dry.delta.sha256" in got and "dry.log.jsonl" in got and any(f.startswith("dry.delta.part") for f in got)
    assert all(os.path.getsize(out / f) <= 16 << 20 for f in got)  # what the device tool brings back
    final = [json.loads(x) for x in open(out / "dry.log.jsonl") if '"final"' in x]
    views = {"heldout", "heldout_shuffled", "seen_heldout", "heldout_n4"}  # the dry job's --eval-cands 10 4 adds n4
    assert final and set(final[-1]["eval"]) == views
    # evaldelta: the packed delta's own held-out views, beside the run's last (what the rank-64 cut costs)
    assert set(json.load(open(out / "dry.delta_eval.json"))) == views
    # evaldelta NAME RANK: the same views of the delta recut to a lower rank (what a smaller file would keep)
    assert set(json.load(open(out / "dry.delta_eval_r2.json"))) == views
    p = _run(["bash", "gpu/land.sh", "--check-only", "dry", str(out)], env)
    assert "the delta applies" in p.stdout
    # a job that continues a shipped model (r24d): stage.sh --init carries its delta, --init FILE starts from it
    delta = tmp_path / "dry.delta.safetensors"
    delta.write_bytes(b"".join((out / f).read_bytes() for f in got if f.startswith("dry.delta.part")))
    g2 = tmp_path / "gpu2"
    _run(["bash", "gpu/stage.sh", "--dir", str(g2), "--keep-tree", "--set", rset, "--init", str(delta)], env)
    assert (g2 / "init" / "delta.safetensors").read_bytes() == delta.read_bytes()
    work = tmp_path / "w2"
    _run([sys.executable, "-m", "icicle.reader", "train", "--set", rset, "--work", str(work), "--init",
          str(g2 / "init" / "delta.safetensors"), "--steps", "1", "--lr", "0", "--decay", "linear", "--batch", "2",
          "--n", "3", "--eval-n", "1", "--save-every", "1", "--device", "cpu", "--bf16", "false"])
    from safetensors.torch import load_file

    from icicle.configs import get_config
    from icicle.delta import base_state_dict, unpack

    want = unpack(load_file(str(delta)), base_state_dict(get_config("reader135")))
    got_sd = torch.load(work / "stage3.pt", map_location="cpu")
    changed = [k for k in want if k in got_sd and not torch.equal(want[k].float(), got_sd[k].float())]
    assert len(got_sd) > 200 and not changed  # lr 0: the weights are the delta's, applied to the backbone


def test_lr_scale_warms_up_then_decays_to_zero():
    assert reader.lr_scale(0, 10, 0.0, "") == pytest.approx(0.1)
    assert reader.lr_scale(50, 10, 0.9, "") == 1.0  # no decay: the lr stays after the warmup
    assert reader.lr_scale(50, 10, 0.25, "linear") == pytest.approx(0.75)
    assert reader.lr_scale(99, 10, 1.0, "linear") == 0.0
    assert reader.lr_scale(99, 10, 1.3, "linear") == 0.0  # a time-bound run that overran its minutes


def test_bad_decay_and_init_are_refused(rset, tmp_path):
    for extra, want in ((["--decay", "cosine", "--steps", "1"], "--decay 'cosine'"),
                        (["--decay", "linear"], "--decay linear needs --steps or --minutes"),
                        (["--init", str(tmp_path / "none.safetensors"), "--steps", "1"], "no such delta file"),
                        (["--summary-tokens", "0", "--steps", "1"], "--summary-tokens 0")):
        # In this process (reader.main, as `python -m icicle.reader` runs it): a refusal is a SystemExit whose
        # message Python prints to stderr with exit status 1; a subprocess each would import torch four times.
        with pytest.raises(SystemExit) as refused:
            reader.main(["train", "--set", rset, "--work", str(tmp_path / "w"), *extra])
        assert want in str(refused.value), (extra, refused.value)
    assert not (tmp_path / "w").exists(), "refused before anything was written"



def _job_sh(fn: str, name: str, env: dict | None = None) -> str:
    """What job.sh's function fn (job_args, job_rank; sourced alone, GR=G) prints for queue job NAME."""
    p = subprocess.run(["bash", "-c", f'source <(sed -n "/^{fn}()/,/^}}/p" gpu/job.sh); GR=G; {fn} "$1"', "-", name],
                       cwd=os.path.join(REPO, "training"), capture_output=True, text=True, check=True, env=env)
    return p.stdout


def _job_args(name: str) -> list[str]:
    """job.sh's arguments of queue job NAME."""
    return _job_sh("job_args", name).split()


def test_every_gpu_queue_job_parses():
    """A job whose arguments the reader refuses would cost a GPU loan: every job of job.sh parses here."""
    src = open(os.path.join(REPO, "training", "gpu", "job.sh")).read()
    names = re.search(r"unknown job \$1 \(([^)]*)\)", src).group(1).split()
    assert set(names) == set(re.findall(r"^    (\w+)\) echo", src, re.M))  # the usage lists every job
    for name in names:
        cmd, a = reader.parse(["train", "--set", "s", "--work", "w", *_job_args(name)])
        assert cmd == "train" and (a.minutes or a.steps), name
    _, a = reader.parse(["train", "--set", "s", "--work", "w", *_job_args("r26e")])
    assert (a.init, a.blocks, a.summary_tokens, a.budget, a.decay) == ("G/init/delta.safetensors", "shared", 64, 1024, "linear")
    assert _job_args("r26f") == _job_args("r26e")  # r26e's run; stage.sh --init picks the delta it continues
    _, a = reader.parse(["train", "--set", "s", "--work", "w", *_job_args("r26g")])
    assert (a.blocks, a.n[-1], a.budget, a.eval_cands) == ("shared", 100, 8192, (10, 100))  # issue 26's 100 candidates


def _job_rank(name: str, override: str = "") -> str:
    """job.sh's delta rank of queue job NAME, ICICLE_DELTA_RANK=override if given."""
    env = {k: v for k, v in os.environ.items() if k != "ICICLE_DELTA_RANK"}
    if override:
        env["ICICLE_DELTA_RANK"] = override
    return _job_sh("job_rank", name, env).strip()


def test_block_readers_are_packed_at_a_higher_rank():
    """r26e's rank-64 delta lost its run's block reading (0.84 -> 0.63 copy pick held out): block jobs pack at 128."""
    assert (_job_rank("r26f"), _job_rank("r26e"), _job_rank("r24g")) == ("128", "128", "64")
    assert _job_rank("r24g", "32") == "32"


def test_snippet_request_is_the_sidecars():
    """The training set's snippets are asked of Elasticsearch as the sidecar asks (adapter.SnippetBody's golden)."""
    with open(os.path.join(REPO, "adapter", "testdata", "snippet_request.json")) as f:
        g = json.load(f)
    assert readerdata.snippet_request(g["query"], g["ids"], g["chars"], tuple(g["fields"])) == g["body"]


def _contains(seq: list[int], sub: list[int]) -> bool:
    return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_snippets_replace_summaries_in_every_instance(rset, rd):
    """--snippets: reading and seen instances show each candidate's snippet for their question, not its summary;
    a set without snippets is refused by name."""
    rs = readerdata.load(rset)
    with pytest.raises(ValueError, match="--snippets: .* has no snippets"):
        reader.Reader(rs, rd.tok, reader.Args(set=rset, work="", snippets=True))
    for q in rs["questions"]:
        q["snip"] = [f"zebra crossing number {i}" for i in range(len(q["list"]))]
    on = reader.Reader(rs, rd.tok, reader.Args(set=rset, work="", kd=0.5, shuffle=0.0, swap_titles=0.0, snippets=True))
    off = reader.Reader(rs, rd.tok, reader.Args(set=rset, work="", kd=0.5, shuffle=0.0, swap_titles=0.0))
    zebra = rd.tok.encode("zebra crossing number")
    for i in range(20):
        a, _ = on.reading_instance(random.Random(i))
        b, _ = off.reading_instance(random.Random(i))
        assert _contains(a.prompt, zebra) and not _contains(b.prompt, zebra)
        assert a.answer == b.answer  # the same question and gold: only what the candidates show changed
    s = on.seen_instance(random.Random(3))
    assert _contains(s.prompt, zebra) and not _contains(off.seen_instance(random.Random(3)).prompt, zebra)


@pytest.mark.elasticsearch
def test_snippets_from_a_real_node():
    """readerdata.add_snippets against the node at ICICLE_ES_URL (the integration step of scripts/test.sh starts
    one): a question's snippet of its document is the sentence it matches, not the summary's start; the scratch
    index is gone afterwards; a bad chars is named."""
    import urllib.error
    import urllib.request

    url = os.environ.get("ICICLE_ES_URL")
    if not url:
        pytest.fail("ICICLE_ES_URL is not set: this test needs the Elasticsearch node scripts/test.sh starts")
    docs = readerdata.load_docs()[0]
    # a real document's sentence of 8-20 words, at least the fourth (past its summary's first words)
    d, sent = next((d, s) for d, doc in docs.items() for s in readerdata._SENT.split(doc.text)[3:]
                   if 8 <= len(s.split()) <= 20)
    other = next(x for x in docs if x != d)
    rs = {"docs": {d: [docs[d].title, "the stored summary"], other: [docs[other].title, "another summary"]},
          "questions": [{"q": sent, "gold": d, "list": [other, d]}]}
    with pytest.raises(ValueError, match="chars: 0"):
        readerdata.add_snippets(rs, url, chars=0, log=lambda *_: None)
    readerdata.add_snippets(rs, url, chars=150, log=lambda *_: None)
    snip = rs["questions"][0]["snip"]
    assert rs["snippet_chars"] == 150 and len(snip) == 2
    words = sent.split()
    assert sum(w in snip[1] for w in words) > 0.6 * len(words), (sent, snip[1])
    assert snip[1] != "the stored summary"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.rstrip("/") + "/" + readerdata.SNIPPET_INDEX)
    assert e.value.code == 404
