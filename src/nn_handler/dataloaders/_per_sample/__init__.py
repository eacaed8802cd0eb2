"""H5SampleDataset's internals.

Member listing in natural order, the sample index and its sidecar, whole-dataset reads,
attributes decoded into labels, and padding collate.
"""
