"""file."""
