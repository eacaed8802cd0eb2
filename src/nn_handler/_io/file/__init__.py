"""The file: opened lazily per process, identified, checked once, read by byte ranges."""
