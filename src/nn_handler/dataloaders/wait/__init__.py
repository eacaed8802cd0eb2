"""Is the step waiting for data? ``WaitMeter`` measures it, ``wait_advice`` says why and the fix.

* ``meter``: ``WaitMeter`` (per-batch wait and step times around any loader) and ``WaitSummary``.
* ``advice``: ``wait_advice`` (likely causes of a wait, from what the loader shows).
"""

from .advice import wait_advice
from .meter import WaitMeter, WaitSummary

__all__ = ["WaitMeter", "WaitSummary", "wait_advice"]
