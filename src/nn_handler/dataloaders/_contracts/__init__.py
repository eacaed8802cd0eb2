"""What the dataloaders' parts agree on without importing each other.

* ``protocols``: the capabilities a dataset, sampler or loader may have (``ChunkAware``,
  ``ReadsAhead``, ``Refreshes``, ...), asked for by what they offer, never by class; the public
  ones are re-exported by ``nn_handler.dataloaders``.
* ``sharding``: which live datasets are rank shards, so that nothing splits a shard again.
"""
