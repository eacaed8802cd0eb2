"""A seeded corpus of damaged HDF5 files, and a runner that reads them in a child process.

``build_corpus`` writes small files (contiguous / chunked / gzip / gzip+shuffle+fletcher32, each
in libver "earliest" and "latest") and damages copies of them: truncations at several offsets,
and byte flips in the superblock, the dataset's object header, the chunk index (B-tree, fixed or
extensible array) and the data itself.

``run_cases`` reads every case in one child process per reader (``h5py`` for the reference,
``ours`` for ``H5LazyDataset``, ``ours-shared`` for it decoded whole after a job killed mid-pass
left the file's region behind: ``shared_node.py``); the child reports each case as it starts
and ends, so a case that hangs (no end within its deadline) or kills the child (a signal) is
pinned on that case, and the child is restarted after it ("per-case fallback").

Run as a script, this module is that child: ``python corruption.py {h5py|ours|ours-shared}
cases.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

KINDS = {
    "contiguous": {},
    "chunked": {"chunks": (50, 8)},
    "gzip": {"chunks": (50, 8), "compression": "gzip"},
    "gzip-shuffle-fletcher32": {
        "chunks": (50, 8),
        "compression": "gzip",
        "shuffle": True,
        "fletcher32": True,
    },
}
LIBVERS = ("earliest", "latest")
ROWS, WIDTH = 600, 8
# signatures of HDF5's chunk indexes: v1 B-tree, fixed array, extensible array, v2 B-tree
_INDEX_SIGNATURES = (b"TREE", b"FAHD", b"FADB", b"EAHD", b"EAIB", b"EADB", b"BTHD", b"BTLF")
CASE_SECONDS = 10.0


@dataclass(frozen=True)
class Case:
    """One damaged file."""

    path: str
    base: str  # kind-libver
    damage: str  # e.g. "truncate@1234" or "flip superblock@20"


def build_corpus(folder: Path, seed: int, flips_per_region: int = 1) -> list[Case]:
    """Write the base files and their damaged copies; return the cases."""
    import h5py

    rng = np.random.default_rng(seed)
    data = (np.arange(ROWS * WIDTH, dtype=np.float32).reshape(ROWS, WIDTH) + 1) / 3
    cases: list[Case] = []
    for kind, kw in KINDS.items():
        for libver in LIBVERS:
            base = folder / f"{kind}-{libver}.h5"
            with h5py.File(base, "w", libver=libver) as f:
                f.create_dataset("x", data=data, **kw)
            for damage, edit in _damages(base, rng, flips_per_region):
                path = folder / f"{kind}-{libver}-{len(cases)}.h5"
                shutil.copyfile(base, path)
                edit(path)
                cases.append(Case(str(path), f"{kind}-{libver}", damage))
    return cases


def _damages(base: Path, rng: Any, flips: int) -> list[tuple[str, Any]]:
    size = base.stat().st_size
    regions = _regions(base)
    out: list[tuple[str, Any]] = []
    first_data = regions["data"][0]
    for cut in sorted({size - 1, size - 100, size * 3 // 4, size // 2, first_data + 37, 700, 40}):
        out.append((f"truncate@{cut}", lambda p, c=cut: os.truncate(p, c)))
    for name, (lo, hi) in regions.items():
        for _ in range(flips if name != "data" else flips + 1):
            at = int(rng.integers(lo, hi))
            mask = int(rng.integers(1, 256))
            out.append((f"flip {name}@{at}^{mask:#04x}", lambda p, a=at, m=mask: _flip(p, a, m)))
    return out


def _regions(base: Path) -> dict[str, tuple[int, int]]:
    """Byte ranges of the superblock, the object header, the chunk index and the data."""
    import h5py

    raw = base.read_bytes()
    with h5py.File(base, "r") as f:
        dset = f["x"]
        info = h5py.h5o.get_info(dset.id)
        header = (int(info.addr), int(info.addr) + max(16, int(info.hdr.space.total)))
        if dset.chunks is None:
            start = int(dset.id.get_offset())
            data = (start, start + int(dset.id.get_storage_size()))
        else:
            chunk = dset.id.get_chunk_info(1)
            data = (int(chunk.byte_offset), int(chunk.byte_offset) + int(chunk.size))
    regions = {"superblock": (0, 48), "object header": header, "data": data}
    found = [raw.find(sig) for sig in _INDEX_SIGNATURES if raw.find(sig) >= 0]
    if found:
        regions["chunk index"] = (min(found), min(found) + 48)
    return regions


def _flip(path: str, at: int, mask: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([byte ^ mask]))


# -- the parent side ------------------------------------------------------------------------


@dataclass
class Outcome:
    """How one reader ended one case."""

    status: str  # "ok", "error", "hang", "signal", "no result"
    digest: str = ""
    error: str = ""
    seconds: float = 0.0


def run_cases(mode: str, cases: list[Case], workdir: Path) -> list[Outcome]:
    """Read every case with ``mode``'s reader in child processes; one outcome per case."""
    spec = workdir / f"{mode}-cases.json"
    spec.write_text(json.dumps([c.path for c in cases]))
    outcomes: dict[int, Outcome] = {}
    start = 0
    while start < len(cases):
        start = _run_child(mode, spec, start, len(cases), outcomes)
    return [outcomes[i] for i in range(len(cases))]


def _run_child(mode: str, spec: Path, first: int, count: int, outcomes: dict[int, Outcome]) -> int:
    """Run one child from case ``first``; return where the next child starts."""
    child = subprocess.Popen(
        [sys.executable, __file__, mode, str(spec), str(first)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(child, lines), daemon=True).start()
    current, deadline = None, time.monotonic() + 120  # the first case waits for the imports
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return _blame(child, current, "hang", first, outcomes)
        if line is None:  # the child ended
            code = child.wait()
            missing = [i for i in range(first, count) if i not in outcomes]
            if current is None and not missing:
                assert child.stdout is not None
                child.stdout.close()
                return count
            what = f"signal {-code}" if code < 0 else f"exit {code}"
            return _blame(
                child, current if current is not None else missing[0], what, first, outcomes
            )
        event = json.loads(line)
        if "start" in event:
            current = int(event["start"])
            deadline = time.monotonic() + CASE_SECONDS + 5
        else:
            outcomes[current] = Outcome(**event)
            current = None


def _blame(
    child: subprocess.Popen[str],
    current: int | None,
    what: str,
    first: int,
    out: dict[int, Outcome],
) -> int:
    if child.poll() is None:
        child.kill()
    child.wait()
    if child.stdout is not None:
        child.stdout.close()
    case = current if current is not None else first
    out[case] = Outcome("hang" if what == "hang" else "signal", error=what)
    return case + 1


def _pump(child: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert child.stdout is not None
    for line in child.stdout:
        lines.put(line)
    lines.put(None)


# -- the child side -------------------------------------------------------------------------


def _read_h5py(path: str) -> np.ndarray[Any, Any]:
    import h5py

    with h5py.File(path, "r") as f:
        return np.asarray(f["x"][()])


def _read_ours(path: str) -> np.ndarray[Any, Any]:
    import warnings

    from nn_handler.dataloaders import H5LazyDataset

    warnings.simplefilter("error")  # a warning is not a clean answer either
    with H5LazyDataset(path, "x") as ds:
        n = len(ds)
        batch = ds[list(range(n))].numpy()
        for i in (0, n // 2, n - 1):  # one sample at a time, and a whole-range read
            if not np.array_equal(ds[i].numpy(), batch[i]):
                raise AssertionError(f"ds[{i}] differs from the batch read")
        if ds._x.read_range(0, n).tobytes() != batch.tobytes():
            raise AssertionError("read_range differs from the batch read")
    return batch


def _read_after_a_killed_job(path: str) -> np.ndarray[Any, Any]:
    from shared_node import after_a_killed_job  # (this file runs as a script: helpers/ on path)

    after_a_killed_job(path)
    return _read_ours(path)


def _child(mode: str, spec: str, first: int) -> None:
    paths = json.loads(Path(spec).read_text())
    read = {"h5py": _read_h5py, "ours": _read_ours, "ours-shared": _read_after_a_killed_job}[mode]
    if mode.startswith("ours"):
        import nn_handler.dataloaders  # noqa: F401  (imported before the first case's clock)
    if mode == "ours-shared":  # every chunked dataset decoded whole, however small
        from nn_handler._io.chunks import decoded_pass

        decoded_pass._DECODED_MIN_BYTES = 0
    for i in range(first, len(paths)):
        print(json.dumps({"start": i}), flush=True)
        began = time.perf_counter()
        try:
            arr = read(paths[i])
            result = {"status": "ok", "digest": hashlib.sha256(arr.tobytes()).hexdigest()}
        except Exception as exc:
            result = {"status": "error", "error": f"{type(exc).__module__}.{type(exc).__name__}"}
            result["error"] += f": {exc}"
        result["seconds"] = round(time.perf_counter() - began, 3)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], int(sys.argv[3]))
