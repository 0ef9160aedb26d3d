"""The Binary Counter generator against the thesis' Algorithm 1 and Figure 4.3."""

import pytest
import torch

from psrnn.studies.relreg.data import START, counter_split, increment, numbers_for, to_bits, training_split


@pytest.mark.parametrize("bits", [1, 3, 6, 10])
def test_increment_is_plus_one_modulo(bits):
    """Algorithm 1 on every k-bit number = (n + 1) mod 2^k, least significant bit first."""
    for n in range(1 << bits):
        assert increment(to_bits(n, bits)) == to_bits((n + 1) % (1 << bits), bits)


def test_carry_out_of_the_top_bit_is_dropped():
    assert increment([1, 1, 1]) == [0, 0, 0]
    assert increment([1, 1, 0]) == [0, 0, 1]


def test_the_thesis_examples():
    """Figure 4.3: input 2,0,0,1,1,1,1,1,1,1 -> output 1,0,1,1,... and 2,1,0,1,... -> 0,1,1,1,..."""
    split = counter_split(9, 0, 0, numbers=[508, 509])
    assert split.x.tolist() == [[2, 0, 0, 1, 1, 1, 1, 1, 1, 1], [2, 1, 0, 1, 1, 1, 1, 1, 1, 1]]
    assert split.y.tolist() == [[1, 0, 1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1, 1, 1, 1]]


def test_splits_enumerate_short_lengths_and_sample_long_ones():
    six = counter_split(6, 1024, 0)
    assert len(six) == 64 and six.numbers.tolist() == list(range(64))
    assert (six.x[:, 0] == START).all() and six.x.shape == (64, 7) and six.y.shape == (64, 6)
    twelve = counter_split(12, 1024, 0)
    assert len(twelve) == 1024 and len(set(twelve.numbers.tolist())) == 1024  # distinct numbers
    assert numbers_for(12, 1024, 0) == numbers_for(12, 1024, 0)  # seeded
    assert numbers_for(12, 1024, 0) != numbers_for(12, 1024, 1)
    # the targets are the inputs plus one
    value = (twelve.y * (1 << torch.arange(12))).sum(1)
    assert value.tolist() == [(n + 1) % 4096 for n in twelve.numbers.tolist()]


def test_training_split_draws_every_three_bit_number():
    train = training_split(3, 512, 0)
    assert len(train) == 512 and sorted(set(train.numbers.tolist())) == list(range(8))
    assert torch.equal(train.x, training_split(3, 512, 0).x)
