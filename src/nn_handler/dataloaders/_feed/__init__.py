"""batched_loader's internals: serving batches from threads of this process."""
