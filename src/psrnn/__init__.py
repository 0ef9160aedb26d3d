"""psrnn: RNNs with private and shared representations, reproduced."""

__version__ = "0.1.0"
