"""icicle.lab.million make: the files it writes are what `icicle ingest -vectors` reads (the header, one record per
document keyed by its title and text, float16), real documents keep their own vectors, and synthetic ones are unit
vectors made of words the real documents use."""
import argparse
import gzip
import json

import numpy as np

from icicle.lab.million import HEADER_KEY, key, make, read_corpus, read_vectors


def _write(path, docs, vecs):
    with gzip.open(path + "/corpus.jsonl.gz", "wt") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    header = {"format": "icicle-vectors/1", "encoder": "enc-test", "dims": vecs.shape[1], "count": len(docs),
              "dtype": "float16", "key": HEADER_KEY}
    with gzip.open(path + "/vectors.bge-small-en-v1.5-q.gz", "wb") as f:
        f.write((json.dumps(header) + "\n").encode())
        for d, v in zip(docs, vecs):
            f.write(key(d["title"], d["text"]) + v.astype("<f2").tobytes())


def test_make(tmp_path):
    rng = np.random.default_rng(0)
    nq, wiki = tmp_path / "nq", tmp_path / "wiki"
    nq.mkdir()
    wiki.mkdir()
    v = rng.standard_normal((5, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    nq_docs = [{"docid": f"N{i}", "title": f"N{i}", "text": f"alpha beta gamma {i}"} for i in range(3)]
    wiki_docs = [{"docid": f"W{i}", "title": f"W{i}", "text": "delta epsilon", "in_nq_qed": False} for i in range(2)]
    wiki_docs.append({"docid": "N0", "title": "N0", "text": "dropped", "in_nq_qed": True})
    _write(str(nq), nq_docs, v[:3])
    _write(str(wiki), wiki_docs[:2], v[3:])
    with gzip.open(wiki / "corpus.jsonl.gz", "at") as f:
        f.write(json.dumps(wiki_docs[2]) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    make(argparse.Namespace(nq=str(nq), wiki=str(wiki / "corpus.jsonl.gz"),
                            wiki_vectors=str(wiki / "vectors.bge-small-en-v1.5-q.gz"), total=40, noise=0.3, seed=7,
                            out=str(out)))
    docs = read_corpus(str(out / "corpus.jsonl.gz"))
    header, vecs = read_vectors(str(out / "vectors.gz"))
    assert header["count"] == len(docs) == 40 and header["dims"] == 8 and header["encoder"] == "enc-test"
    assert [d["docid"] for d in docs[:5]] == ["N0", "N1", "N2", "W0", "W1"]  # the wiki copy of N0 is left out
    for d, want in zip(docs[:5], v):
        np.testing.assert_allclose(vecs[key(d["title"], d["text"])], want, atol=1e-3)
    words = {"alpha", "beta", "gamma", "delta", "epsilon", "0", "1", "2"}
    synthetic = docs[5:]
    assert all(d["docid"].startswith("syn-") for d in synthetic)
    assert len({d["docid"] for d in docs}) == 40
    for d in synthetic:
        assert set(d["text"].split()) <= words and set(d["title"].lower().split()) <= words
        np.testing.assert_allclose(np.linalg.norm(vecs[key(d["title"], d["text"])]), 1.0, atol=2e-3)
