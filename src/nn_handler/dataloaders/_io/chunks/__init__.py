"""chunks."""
