"""Facts about the machine this process runs on (what the memory checks and the benchmark ask)."""

from __future__ import annotations

__all__ = ["MEMINFO", "available_ram_bytes"]

MEMINFO = "/proc/meminfo"


def available_ram_bytes() -> int | None:
    """Return ``MemAvailable`` from ``/proc/meminfo`` in bytes, or None where unknown."""
    try:
        with open(MEMINFO, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        return None
    return None
