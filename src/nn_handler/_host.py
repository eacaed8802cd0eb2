"""Facts about the machine this process runs on (what the memory checks and the benchmark ask)."""

from __future__ import annotations

__all__ = ["MEMINFO", "available_ram_bytes", "usable_ram_bytes"]

MEMINFO = "/proc/meminfo"
CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"


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


def usable_ram_bytes() -> int | None:
    """RAM this process may still fill: ``MemAvailable``, less where its cgroup allows less.

    In a container or a batch job's cgroup, ``MemAvailable`` tells the host's memory while the
    cgroup's limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) ends the job first.
    """
    free = available_ram_bytes()
    room = _cgroup_room()
    if free is None or room is None:
        return free if room is None else room
    return min(free, room)


def _cgroup_room() -> int | None:
    """The limit of this process's memory cgroup less its usage, or None (no limit, unknown)."""
    try:
        with open(CGROUP, encoding="ascii") as f:
            lines = [line.strip().split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        return None
    for hierarchy, controllers, path in lines:
        if hierarchy == "0" and controllers == "":  # v2: one unified hierarchy
            base = f"{CGROUP_ROOT}{path}"
            room = _room(f"{base}/memory.max", f"{base}/memory.current")
        elif "memory" in controllers.split(","):
            base = f"{CGROUP_ROOT}/memory{path}"
            room = _room(f"{base}/memory.limit_in_bytes", f"{base}/memory.usage_in_bytes")
        else:
            continue
        if room is not None:
            return room
    return None


def _room(limit_file: str, usage_file: str) -> int | None:
    try:
        with open(limit_file, encoding="ascii") as f:
            limit = f.read().strip()
        with open(usage_file, encoding="ascii") as f:
            usage = int(f.read().strip())
    except (OSError, ValueError):
        return None
    if limit == "max" or not limit.isdigit() or int(limit) >= 2**62:  # no limit set
        return None
    return max(0, int(limit) - usage)
