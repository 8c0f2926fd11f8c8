from icicle.data import is_new_doc


def test_split_is_deterministic_and_disjoint(split):
    from icicle.data import make_split

    assert make_split().data_version == split.data_version
    assert split.data_version.startswith("nq_qed@")
    assert not set(split.d_train) & set(split.d_new)
    n = len(split.docs)
    assert 0.07 * n < len(split.d_new) < 0.13 * n
    assert all(not is_new_doc(q.docid) and q.nq_split == "train" for q in split.train)
    assert not {q.qid for q in split.dev} & {q.qid for q in split.test}
    assert all(q.nq_split == "dev" for q in split.dev + split.test)
