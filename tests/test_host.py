"""The machine's facts: available RAM from ``/proc/meminfo``."""

from __future__ import annotations

import os

from nn_handler import _host


def test_available_ram_reads_meminfo(tmp_path, monkeypatch):
    real = _host.available_ram_bytes()
    if os.path.exists("/proc/meminfo"):
        assert real is not None and real > 0
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       1000 kB\nMemFree:         10 kB\nMemAvailable:    300 kB\n")
    monkeypatch.setattr(_host, "MEMINFO", str(fake))
    assert _host.available_ram_bytes() == 300 * 1024
    fake.write_text("MemTotal:       1000 kB\n")  # old kernels lack MemAvailable
    assert _host.available_ram_bytes() is None
    monkeypatch.setattr(_host, "MEMINFO", str(tmp_path / "absent"))
    assert _host.available_ram_bytes() is None
