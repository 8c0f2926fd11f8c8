"""Negative sampling for in-context instances: the seam where dense hard negatives plug in.

The paper (appendix A.2) fills the irrelevant slots with H(d*): the top-100 nearest D_train neighbours of the
gold document under bge-base-en-v1.5 (l2-normalised, exact inner product). That needs an embedding model and
is the `small` / `full` configs' job. The `tiny` config uses ``RandomNegatives``: uniform draws from the pool.
A hard-negative sampler implements the same ``sample`` signature.
"""
from __future__ import annotations

import random
from typing import Protocol, Sequence


class NegativeSampler(Protocol):
    def sample(self, gold: str, k: int, rng: random.Random) -> list[str]:
        """Returns k distinct docids != gold."""


class RandomNegatives:
    """Uniform negatives from a fixed pool of docids (the tiny config's stand-in for H(d*))."""

    def __init__(self, pool: Sequence[str]) -> None:
        self.pool = list(pool)

    def sample(self, gold: str, k: int, rng: random.Random) -> list[str]:
        out: list[str] = []
        seen = {gold}
        if len(self.pool) - (gold in self.pool) < k:
            raise ValueError(f"negative pool of {len(self.pool)} too small for k={k}")
        while len(out) < k:
            d = rng.choice(self.pool)
            if d not in seen:
                seen.add(d)
                out.append(d)
        return out


class DenseHardNegatives:
    """Placeholder for bge-base-en-v1.5 top-100 neighbours (ICICLE appendix A.2)."""

    def __init__(self, *_: object) -> None:
        raise NotImplementedError("dense hard negatives (bge-base-en-v1.5 + exact IP) are not implemented yet; "
                                  "tracked with the `small` config issue")
