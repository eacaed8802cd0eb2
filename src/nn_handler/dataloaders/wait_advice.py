"""The import path ``nn_handler.dataloaders.wait_advice`` of earlier releases.

``wait_advice`` lives in ``nn_handler.dataloaders.wait`` (``wait/advice.py``) beside
``WaitMeter``; this module keeps ``from nn_handler.dataloaders.wait_advice import wait_advice``
working.
"""

from .wait.advice import wait_advice

__all__ = ["wait_advice"]
