"""Installs the simulated platform named by ``NN_HANDLER_SIMULATE`` (``simulated_platform``).

Python imports ``sitecustomize`` at start-up; this folder is on ``PYTHONPATH`` only for the
simulated runs (``.ci/portable``), so every process of such a run, spawned ones included, starts
on the simulated platform.
"""

import os

if os.environ.get("NN_HANDLER_SIMULATE"):
    import simulated_platform

    simulated_platform.install(os.environ["NN_HANDLER_SIMULATE"])
