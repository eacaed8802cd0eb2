"""Run ``inspect_file`` on every HDF5 file under the given folders; count files, datasets, aborts.

Used for: ``python benchmarks/inspect_corpus.py DIR [DIR ...]``.
An abort is ``inspect_file`` raising; ``errors`` counts objects the report lists as unreadable.
"""

from __future__ import annotations

import glob
import json
import os
import sys

import h5py

from nn_handler.h5inspect import inspect_file


def files_under(folders: list[str]) -> list[str]:
    found = []
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "**", "*"), recursive=True)):
            if os.path.isfile(path) and h5py.is_hdf5(path):
                found.append(path)
    return found


def main(folders: list[str]) -> None:
    totals = {"files": 0, "datasets": 0, "aborts": 0, "unreadable": 0, "structures": 0}
    for path in files_under(folders):
        totals["files"] += 1
        try:
            report = inspect_file(path)
            json.dumps(report.to_dict(), allow_nan=False)
        except Exception as exc:
            totals["aborts"] += 1
            print(f"ABORT {path}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        data = report.to_dict()
        totals["datasets"] += len(report.datasets) + report.omitted_datasets
        totals["unreadable"] += sum(d.get("error") is not None for d in data["datasets"])
        totals["structures"] += len(data.get("structures", []))
    print(json.dumps(totals))


if __name__ == "__main__":
    main(sys.argv[1:])
