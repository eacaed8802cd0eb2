"""The suites: ``layouts`` (``run.py``'s default), ``workloads`` (W1–W4, RC) and ``sparse``."""
