"""The samplers' internals: what an elastic resume leaves to split (``elastic``)."""
