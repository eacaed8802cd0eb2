"""Rows of one dataset (or compound field) for a batch of indices, and the window plan."""
