"""What is not rows of one dataset: whole datasets, attributes, groups, sparse matrices."""
