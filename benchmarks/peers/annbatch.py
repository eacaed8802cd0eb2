"""annbatch (scverse), a store peer of the sparse suite: its environment and its runs.

Benchmark-time only: making annbatch's environment runs ``venv`` and ``pip``, which the shipped
package never does; it happens only when the sparse benchmark's stores table is asked for
(``--tables stores``, on by default there; ``--no-install`` only looks).

annbatch needs Python >= 3.12 and no torch, so it runs in an environment of its own, through
``annbatch_worker.py`` (a standalone script) in a subprocess:

* ``ensure_env`` finds that environment (a venv, ``build/annbatch-venv`` by default) or makes
  it from a Python >= 3.12 (``python3.12`` … on ``PATH`` or pyenv's) with
  ``pip install "annbatch[zarrs,numba]==0.3.1"``; anything that fails raises
  ``AnnbatchUnavailableError`` with a one-line reason, which the benchmark prints instead of
  annbatch's rows;
* ``AnnbatchRunner`` converts the ``.h5ad`` once (timed, with the converting process's peak
  RSS) and times annbatch's loading in rounds interleaved with ours.

Its ``"sparse-store"`` adapter (``prepare``) is ``ensure_env`` on ``{envs}/annbatch-venv``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cases import Conversion, Kind, PeerUnavailableError
from ..registry import Peer, register
from .annbatch_worker import MARKER

__all__ = [
    "ANNBATCH_SPEC",
    "AnnbatchEnv",
    "AnnbatchRunner",
    "AnnbatchUnavailableError",
    "ensure_env",
    "find_python",
    "parse_result",
    "prepare",
    "rates_of",
]

ANNBATCH_SPEC = "annbatch[zarrs,numba]==0.3.1"
_WORKER = str(Path(__file__).with_name("annbatch_worker.py"))
_PROBE = (
    "import annbatch, numba, zarrs\n"
    "from importlib.metadata import version\n"
    "print(version('annbatch'))"
)
# seconds; a pip install resolves and downloads ~50 packages, a 200k-cell conversion takes ~40 s
_INSTALL_TIMEOUT = 1800
_CONVERT_TIMEOUT = 3600
_PROBE_TIMEOUT = 120


class AnnbatchUnavailableError(PeerUnavailableError):
    """annbatch cannot be installed or run here; the message is the one-line reason."""


@dataclass(frozen=True)
class AnnbatchEnv:
    """A Python with annbatch importable, and annbatch's version there."""

    python: str
    version: str

    @property
    def name(self) -> str:
        """``annbatch``: its name in the table."""
        return "annbatch"

    def runner(self, h5ad: str, batch: int, dataset_size: str | None) -> AnnbatchRunner:
        """annbatch on ``h5ad``, its store next to it, batches of ``batch`` cells."""
        store = f"{os.path.splitext(h5ad)[0]}.annbatch.zarr"
        return AnnbatchRunner(self, h5ad, store, batch, dataset_size=dataset_size)

    def notes(self, batch: int) -> list[str]:
        """How it converts, loads and mixes, for the table."""
        return [
            "annbatch's batches are drawn from 32-cell store chunks whose cells its conversion "
            "fixed (`DatasetCollection.add_adatas`, its defaults: a sharded Zarr store).",
            f"annbatch: `Loader(batch_size={batch}, chunk_size=32, preload_nchunks=256, "
            "shuffle=True).use_collection(collection, load_adata=X only)`, zarrs codec pipeline, "
            f"in its own environment ({self.python}), a subprocess whose start is not timed.",
        ]


def _clean_env() -> dict[str, str]:
    # The other environment must not see this one's paths (numpy of another Python would load)
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(cmd: Sequence[str], timeout: float, what: str) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; raise ``AnnbatchUnavailableError`` naming ``what`` if it fails or stalls."""
    try:
        done = subprocess.run(
            list(cmd),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_clean_env(),
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise AnnbatchUnavailableError(f"{what} timed out after {timeout:.0f} s") from err
    except OSError as err:
        raise AnnbatchUnavailableError(f"{what} could not start: {err}") from err
    if done.returncode != 0:
        raise AnnbatchUnavailableError(
            f"{what} failed (exit {done.returncode}): {_last_line(done.stderr)}"
        )
    return done


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def _python_ok(python: str) -> bool:
    """Whether ``python`` runs and is at least 3.12 (a pyenv shim may exist yet not run)."""
    try:
        _run([python, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"], 60, python)
    except AnnbatchUnavailableError:
        return False
    return True


def find_python(explicit: str | None = None) -> str | None:
    """A Python >= 3.12 that runs: ``explicit`` only if given, else ``PATH``'s or pyenv's."""
    if explicit is not None:
        return explicit if _python_ok(explicit) else None
    found = [shutil.which(f"python3.{minor}") for minor in range(12, 16)]
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found += sorted(glob.glob(os.path.join(pyenv, "versions", "3.1[2-9]*", "bin", "python")))
    return next((p for p in found if p is not None and _python_ok(p)), None)


def _venv_python(venv: str) -> str:
    return os.path.join(venv, "Scripts" if os.name == "nt" else "bin", "python")


def _probe(python: str) -> AnnbatchEnv:
    done = _run([python, "-c", _PROBE], _PROBE_TIMEOUT, "importing annbatch")
    return AnnbatchEnv(python, done.stdout.strip())


def ensure_env(venv: str, python: str | None = None, install: bool = True) -> AnnbatchEnv:
    """Return annbatch's environment at ``venv``, making it first if needed and ``install``.

    Args:
        venv: The venv's folder (made with ``python -m venv`` when missing).
        python: The Python >= 3.12 to make it from (default: ``find_python()``).
        install: Make the venv / install annbatch when missing (else skip).

    Raises:
        AnnbatchUnavailableError: no usable environment, with the reason.
    """
    env_python = _venv_python(venv)
    if os.path.exists(env_python):
        try:
            return _probe(env_python)
        except AnnbatchUnavailableError:
            if not install:
                raise
    elif not install:
        raise AnnbatchUnavailableError(
            f"no annbatch environment at {venv} (installing it was turned off)"
        )
    if not os.path.exists(env_python):
        base = find_python(python)
        if base is None:
            found = f"{python} is not one that runs" if python else "none on PATH or in pyenv"
            raise AnnbatchUnavailableError(f"annbatch needs Python >= 3.12; {found}")
        _run([base, "-m", "venv", venv], 300, f"making the venv {venv}")
    pip = [env_python, "-m", "pip", "install", "--disable-pip-version-check", "-q", ANNBATCH_SPEC]
    _run(pip, _INSTALL_TIMEOUT, f"pip install {ANNBATCH_SPEC}")
    return _probe(env_python)


def parse_result(stdout: str) -> dict[str, Any]:
    """The worker's result: the JSON of its last ``NNH-ANNBATCH`` line.

    Raises:
        AnnbatchUnavailableError: no such line, or it does not hold a JSON object.
    """
    lines = [line for line in stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        raise AnnbatchUnavailableError(
            f"the annbatch worker printed no result: {_last_line(stdout)}"
        )
    try:
        result = json.loads(lines[-1][len(MARKER) :])
    except json.JSONDecodeError as err:
        raise AnnbatchUnavailableError(f"the annbatch worker's result is not JSON: {err}") from err
    if not isinstance(result, dict):
        raise AnnbatchUnavailableError("the annbatch worker's result is not a JSON object")
    return result


@dataclass
class AnnbatchRunner:
    """annbatch on one ``.h5ad``: convert once into ``store``, then time loading passes.

    The loader has annbatch's README settings: ``Loader(batch_size, chunk_size=32,
    preload_nchunks=256)``, here with ``shuffle=True`` (a fresh draw of store chunks each epoch).
    """

    env: AnnbatchEnv
    h5ad: str
    store: str
    batch_size: int = 4096
    chunk_size: int = 32
    preload_nchunks: int = 256
    #: ``add_adatas(dataset_size=)`` for the conversion (None: annbatch's 20GB)
    dataset_size: str | None = None

    @property
    def label(self) -> str:
        """Its rows' loader name: version and loader settings."""
        return (
            f"annbatch {self.env.version} (chunk_size={self.chunk_size}, "
            f"preload_nchunks={self.preload_nchunks})"
        )

    @property
    def batches(self) -> dict[Kind, str]:
        """What its passes serve: SciPy CSR batches, and the same made dense."""
        return {"csr": "SciPy CSR", "dense": "SciPy CSR + .toarray()"}

    def _cmd(self, command: str, *extra: str) -> list[str]:
        return [self.env.python, _WORKER, command, self.h5ad, self.store, *extra]

    def convert(self, seed: int = 0) -> Conversion:
        """Convert the ``.h5ad`` (replacing an earlier store); time it."""
        extra = ["--seed", str(seed)]
        if self.dataset_size is not None:
            extra.append(f"--dataset-size={self.dataset_size}")
        done = _run(self._cmd("convert", *extra), _CONVERT_TIMEOUT, "annbatch's conversion")
        r = parse_result(done.stdout)
        try:
            return Conversion(float(r["seconds"]), int(r["peak_rss_bytes"]), int(r["store_bytes"]))
        except (KeyError, TypeError, ValueError) as err:
            raise AnnbatchUnavailableError(f"annbatch's conversion result lacks {err}") from err

    def load(
        self, seconds: float, seed: int = 0, order_out: str | None = None, cold: bool = False
    ) -> dict[Kind, float]:
        """Cells/s of one CSR pass and one ``.toarray()`` pass (``seconds`` each).

        With ``order_out``, the ``.h5ad`` rows of the first full batches are saved there first
        (a ``(batches, batch_size)`` array, ``numpy.save``). ``cold``: the store's pages are
        dropped from the page cache before each pass, and every batch is timed.
        """
        extra = [
            f"--seconds={seconds}",
            f"--seed={seed}",
            f"--batch-size={self.batch_size}",
            f"--chunk-size={self.chunk_size}",
            f"--preload-nchunks={self.preload_nchunks}",
        ]
        if order_out is not None:
            extra.append(f"--order-out={order_out}")
        if cold:
            extra.append("--cold")
        done = _run(self._cmd("load", *extra), 600 + 4 * seconds, "annbatch's loading")
        return rates_of(parse_result(done.stdout))


def rates_of(result: dict[str, Any]) -> dict[Kind, float]:
    """Cells/s of the worker's ``csr`` and ``dense`` passes (NaN for an empty pass).

    Raises:
        AnnbatchUnavailableError: the result lacks them.
    """
    kinds: tuple[Kind, ...] = ("csr", "dense")
    try:
        counts = {k: (float(result[k]["cells"]), float(result[k]["seconds"])) for k in kinds}
    except (KeyError, TypeError, ValueError) as err:
        raise AnnbatchUnavailableError(f"annbatch's loading result lacks {err}") from err
    return {k: cells / s if s > 0 else float("nan") for k, (cells, s) in counts.items()}


def prepare(envs: str, python: str | None = None, install: bool = True) -> AnnbatchEnv:
    """The ``"sparse-store"`` adapter: ``ensure_env`` on ``{envs}/annbatch-venv``."""
    return ensure_env(os.path.join(envs, "annbatch-venv"), python, install)


register(Peer("annbatch", "peer", {"sparse-store": prepare}))
