import torch

from icicle import model as M
from icicle.lab.queryside import full_step, past_of, query_step

TINY = M.ModelConfig(vocab_size=64, hidden=32, layers=2, heads=4, kv_heads=2, head_dim=8, intermediate=48)


def test_the_query_side_over_a_cached_past_is_the_full_forward_at_those_positions():
    torch.manual_seed(0)
    m = M.Decoder(TINY)
    ids = torch.randint(0, 64, (2, 12))
    full = m.train_logits(ids, torch.ones_like(ids, dtype=torch.bool), torch.tensor([0, 1]), torch.tensor([10, 10]))
    past = past_of(m, ids[:, :7])
    q = ids[:, 7:]
    pos = (torch.arange(5) + 7).unsqueeze(0).expand(2, 5)
    step = m.step(q, pos, M.causal_mask(7, 5).expand(2, 5, 12), torch.tensor([3]), *past)[0]
    assert torch.allclose(full, step[:, 0], atol=1e-4)


def test_the_query_step_trains_only_through_the_query_tokens():
    torch.manual_seed(1)
    m, frozen = M.Decoder(TINY), M.Decoder(TINY)
    frozen.load_state_dict(m.state_dict())
    frozen.requires_grad_(False)
    ids = torch.randint(0, 64, (2, 12))
    past = past_of(frozen, ids[:, :7])
    assert not any(p.requires_grad for p in past)
    before = [p.detach().clone() for p in m.parameters()]
    kept = {k: v.clone() for k, v in frozen.state_dict().items()}
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    first = query_step(m, opt, past, ids[:, 7:], answer=3)
    for _ in range(20):
        last = query_step(m, opt, past, ids[:, 7:], answer=3)
    assert last < first  # it learns the answer tokens
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, m.parameters()))
    assert all(torch.equal(kept[k], v) for k, v in frozen.state_dict().items())  # the blocks' weights never move
    assert full_step(m, opt, ids, answer=3) > 0
