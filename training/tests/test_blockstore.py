import pytest

from icicle.lab.blockstore import replay, zipf_stream


def test_replay_counts_misses_and_evicts_the_least_recent():
    cands = [["a", "b"], ["b", "c"], ["a", "d"]]
    # capacity 2: q0 misses a, b; q1 hits b, misses c (evicts a); q2 misses a (evicts b) and d (evicts c)
    o = replay(cands, [0, 1, 2], capacity=2)
    assert o.misses == [1, 2, 2]
    assert o.hit_rate == pytest.approx(1 / 6)
    # after a warm-up of one request only the rest count
    assert replay(cands, [0, 1, 2], capacity=2, warm=1).misses == [1, 2]


def test_replay_routes_by_query_to_the_same_replica():
    cands = [["a"], ["b"]]
    # two replicas of one document each: by query every repeat hits; the first request of each query misses
    o = replay(cands, [0, 1, 0, 1, 0, 1], capacity=1, replicas=2, route="query")
    assert o.misses == [0, 0, 0, 0, 1, 1]


def test_replay_refuses_bad_settings():
    with pytest.raises(ValueError, match="capacity"):
        replay([["a"]], [0], capacity=0)
    with pytest.raises(ValueError, match="route"):
        replay([["a"]], [0], capacity=1, route="sticky")


def test_zipf_stream_is_skewed_and_repeatable():
    s = zipf_stream(100, 1.2, 5000, seed=3)
    assert s == zipf_stream(100, 1.2, 5000, seed=3)
    top = max(set(s), key=s.count)
    assert s.count(top) > 5000 / 100 * 5  # the most asked query far above a uniform share
    u = zipf_stream(100, 0.0, 5000, seed=3)
    assert max(u.count(q) for q in set(u)) < 5000 / 100 * 2
