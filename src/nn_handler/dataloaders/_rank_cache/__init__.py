"""RankMemCachedH5Dataset's internals: the shard plan, the preload, shared / pinned host memory."""
