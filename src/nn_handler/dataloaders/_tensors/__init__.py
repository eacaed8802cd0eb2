"""Rows → samples: tensors, columns of any key, stacked batches.

``split`` is the one way between a stacked batch and its samples, for every dataset.

The layer between ``_io`` (bytes and rows, no torch) and the datasets.
"""
