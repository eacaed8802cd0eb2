"""Adapters for training frameworks; each module imports its framework, this package none.

``nn_handler.integrations.lightning``: ``DataWaitMonitor``, a Lightning callback that logs how
much of each epoch the step waited for data, and ``H5PredictionWriter``, which writes
``trainer.predict``'s outputs into one HDF5 file (needs ``lightning``).

Whether a framework's own loader splits a sampler's order across processes is found where the
samplers ask it, ``nn_handler.dataloaders.samplers.frameworks``, without importing the framework.
"""
