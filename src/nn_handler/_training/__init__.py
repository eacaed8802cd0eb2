"""NNHandler's internals: batches, device, DDP, loaders, step, epoch, fit loop, checkpoints.

Nothing here knows HDF5: the training layer sees datasets and loaders only through the public
``nn_handler.dataloaders`` surface and its capability protocols.
"""
