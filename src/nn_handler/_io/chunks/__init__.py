"""The one chunk engine: chunk table, codec pipeline, window of decoded chunks, decode pool."""
