"""The benchmarks that compare nn_handler with its peers and with the machine's limits.

* ``harness``: rounds, alternation of contenders per round, medians, ratio tables and targets;
  every suite times through it.
* ``registry``: the peers and limits, each registered once by its own module in ``peers``.
* ``cases``: the types a suite hands its peers and gets back (a peer imports no suite).
* ``suites``: the layout suite (``python benchmarks/run.py``), the workloads (W1–W4, RC) and
  the sparse rows; each asks the registry for its peers.

Not installed with the package: a script run as ``python benchmarks/X.py`` puts the repository
root on ``sys.path`` itself; the tests have it through pytest's ``pythonpath``.
"""
