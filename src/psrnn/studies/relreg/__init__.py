"""The second study: relation-level regularization of RNNs on the Binary Counter task (psrnn.registry)."""
