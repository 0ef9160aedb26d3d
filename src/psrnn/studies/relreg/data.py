"""Binary Counter data (thesis Algorithm 1): a k-bit number in, the same number plus one out.

    from psrnn.studies.relreg.data import counter_split
    split = counter_split(bits=8, count=1024, seed=0)   # x (N, 9) tokens, y (N, 8) bits

Bits are least significant first (the thesis reverses each number, since the increment
starts at the lowest bit). Step 0 of every input is the start token START; the model
emits one bit per input step, and steps 1..k are scored against Y[1..k]. The carry out of
the top bit is dropped, as the algorithm writes it (all ones -> all zeros).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

START = 2  # the start token at step 0 (thesis Figure 4.3 shows it as 2)


def increment(x: list[int]) -> list[int]:
    """Algorithm 1, line by line: X (k bits, LSB first) -> Y = X + 1 (k bits)."""
    y = [0] * len(x)
    updating = True
    for i in range(len(x)):
        if updating:
            y[i] = 1 - x[i]  # Y[i] <- ~X[i]
            if x[i] == 0:
                updating = False
        else:
            y[i] = x[i]
    return y


def to_bits(n: int, bits: int) -> list[int]:
    """n as `bits` binary digits, least significant first."""
    return [(n >> i) & 1 for i in range(bits)]


@dataclass(frozen=True)
class CounterSplit:
    """N numbers of one bit count: inputs (N, k + 1) with the start token, targets (N, k)."""

    bits: int
    x: torch.Tensor  # (N, k + 1) int64 in {0, 1, START}
    y: torch.Tensor  # (N, k) int64 in {0, 1}
    numbers: torch.Tensor  # (N,) the inputs as integers (for inspection and tests)

    def __len__(self) -> int:
        return len(self.y)


def numbers_for(bits: int, count: int, seed: int) -> list[int]:
    """All 2^bits numbers in order when count >= 2^bits; else `count` distinct ones drawn
    with a seeded random.Random (sorted, so the split does not depend on draw order)."""
    total = 1 << bits
    if count >= total:
        return list(range(total))
    return sorted(random.Random(f"bincounter-{bits}-{seed}").sample(range(total), count))


def counter_split(bits: int, count: int, seed: int, numbers: list[int] | None = None) -> CounterSplit:
    """The split of `bits`-bit numbers (see numbers_for), or exactly `numbers` when given."""
    ns = numbers_for(bits, count, seed) if numbers is None else numbers
    xs = [to_bits(n, bits) for n in ns]
    x = torch.tensor([[START, *b] for b in xs], dtype=torch.long).reshape(len(ns), bits + 1)
    y = torch.tensor([increment(b) for b in xs], dtype=torch.long).reshape(len(ns), bits)
    return CounterSplit(bits, x, y, torch.tensor(ns, dtype=torch.long))


def training_split(bits: int, size: int, seed: int) -> CounterSplit:
    """`size` training sequences drawn uniformly (with replacement) from all 2^bits numbers:
    3-bit numbers are only 8, so an epoch visits each of them size/8 times on average."""
    rng = random.Random(f"bincounter-train-{bits}-{seed}")
    return counter_split(bits, size, seed, numbers=[rng.randrange(1 << bits) for _ in range(size)])
