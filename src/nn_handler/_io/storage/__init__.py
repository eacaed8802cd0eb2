"""Bytes: the byte sources (local files, URLs) and what identifies their version."""
