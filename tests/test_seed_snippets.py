"""The Python snippets of the seed documents (tests/seeds/) work in our stack.

The seeds are the documents users know the library from; their snippets must run here. Each
snippet is listed below, either as not code (a signature listing or a shell command in a Python
fence: the test checks it does not compile, so a real snippet cannot hide there) or as one or
more runs:

- imports are mapped to ours (``src.nn_handler`` → ``nn_handler``, the combined seed's
  ``hdf5_dataset`` → ``nn_handler.dataloaders.combined_h5_dataset``), and the blog's
  ``/some/path.h5`` to a file in the test's directory; nothing else in the snippet changes;
- a *prelude* defines what the snippet uses without defining it (``np``, ``YourModel``,
  ``criterion``, ``num_epochs``, paths, or the names an earlier snippet of the same seed
  defined); it is listed with each run;
- an *epilogue* continues where the snippet stops (calls the function it defines, or trains
  with what it set up), and *fills* replace a snippet's placeholder comment with the code it
  stands for; each is part of the run's name (``-train``) and listed with it;
- snippets written for GPUs run as written only with CUDA (``cuda`` marker, skipped without);
  a ``-cpu`` run also runs them on CPUs with only the device and backend names changed
  (``nccl`` → ``gloo``, ``.cuda(...)`` → ``.to("cpu", ...)``, no ``set_device``), so CI runs
  them everywhere;
- snippets that need several processes run on 2 ranks over ``gloo`` (``helpers.ddp``).

Runs that do not work today are ``xfail(strict=True)`` with the exact error, and a regex
(``match``) the failure's message must match, so a different failure is not hidden behind the
mark: when a fix lands, the run passes, the test fails, and the mark must go. A run that
continues a snippet runs the snippet itself unchanged first, so the costly DDP snippets run only
in their continued form.
"""

from __future__ import annotations

import multiprocessing
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers.ddp import run_ddp
from helpers.doc_files import write_seed_files
from helpers.snippets import MACHINE_WARNINGS, Snippet, python_blocks, run_in_rank

SEEDS = Path(__file__).resolve().parent / "seeds"
IMPORTS = (
    ("src.nn_handler", "nn_handler"),
    ("from hdf5_dataset import", "from nn_handler.dataloaders.combined_h5_dataset import"),
    ('"/some/', '"some/'),  # the blog's absolute example paths, under the test's directory
)
CPU_PORT = (  # device and backend names only
    ('backend="nccl"', 'backend="gloo"'),
    ('init_process_group("nccl"', 'init_process_group("gloo"'),
    ("torch.cuda.set_device(local_rank)", "pass  # CPU port: no device to bind"),
    ("torch.cuda.set_device(rank)", "pass  # CPU port: no device to bind"),
    (".cuda(non_blocking=True)", '.to("cpu", non_blocking=True)'),
    ("().cuda()", "()"),
    ("device_ids=[local_rank]", "device_ids=None"),
    ("device_ids=[rank]", "device_ids=None"),
)
DDP_TIMEOUT = 240  # seconds for all ranks of one run, spawn and imports included

IMAGE_MODEL = """\
import torch
from torch import nn


class YourModel(nn.Module):  # the seeds' images are 3 x 8 x 8, in 10 classes
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10))

    def forward(self, x):
        return self.net(x)
"""
COMBINED = """\
import torch
from torch import nn
from torch.utils.data import DataLoader
from nn_handler.dataloaders.combined_h5_dataset import (
    CombinedHDF5Dataset,
    create_optimized_dataloader,
)

hdf5_files = ["train1.h5", "train2.h5", "train3.h5"]
T = 12  # time steps per window: fhr_st is (2, T), target (T, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"
"""
TRAIN = """\
handler.set_optimizer(torch.optim.SGD, lr=0.1)
handler.set_loss_fn(nn.CrossEntropyLoss())
history = handler.train(epochs=num_epochs)
"""


@dataclass(frozen=True)
class Run:
    """One way to run one seed snippet (see the module docstring)."""

    seed: str
    index: int
    variant: str = ""
    prelude: str = ""
    after: tuple[int, ...] = ()  # snippets of the same seed to run first, in one namespace
    fills: tuple[tuple[str, str], ...] = ()
    epilogue: str = ""
    ranks: int = 1
    cuda: bool = False  # as written, it needs a GPU
    cpu: bool = False  # this is the CPU port of a GPU snippet
    slow: bool = False
    needs: str = ""  # a module the snippet imports that may not be installed
    fork: bool = False  # DataLoader workers of a class the snippet defines: see _param
    xfail: str = ""
    raises: type[BaseException] = AssertionError  # what the xfail raises (run_ddp: Assertion)
    match: str = ""  # and a regex its message must match: failing differently is a failure
    ignore: tuple[str, ...] = ()  # more warning filters ("action:message:category")
    rank_ignore: tuple[str, ...] = ()  # warnings of the machine on its DDP ranks (see RUNS)
    keep: tuple[str, ...] = ("history",)  # names the ranks send back

    @property
    def name(self) -> str:
        return f"{self.seed}#{self.index}" + (f"-{self.variant}" if self.variant else "")


NOT_CODE = {
    ("h5_dataloader.md", 0): "signature listing of H5LazyDataset.__init__ (no body)",
    ("h5_dataloader.md", 1): "signature of h5_worker_init_fn (no body)",
    ("rank_cached_h5_dataloader.md", 0): "signature of _balanced_contiguous_shard (no body)",
    ("rank_cached_h5_dataloader.md", 1): "signature of _interleaved_indices (no body)",
    ("rank_cached_h5_dataloader.md", 2): "signature listing of RankMemCachedH5Dataset.__init__",
    ("rank_cached_h5_dataloader.md", 3): "signature listing of EpochShuffleSampler.__init__",
    ("combined_hdf5_dataset_readme.md", 0): "a pip command in a Python fence",
}

RUNS = [
    # dataloaders_overview.md -----------------------------------------------------------------
    Run("dataloaders_overview.md", 0, prelude=IMAGE_MODEL),
    Run(
        "dataloaders_overview.md",
        0,
        "train",
        prelude=IMAGE_MODEL + "num_epochs = 1\n",
        epilogue=TRAIN,
        slow=True,
    ),
    Run(
        "dataloaders_overview.md",
        1,
        "train",
        prelude=IMAGE_MODEL + "num_epochs = 1\n",
        epilogue=TRAIN + "handler.close()\n",
        ranks=2,
    ),
    # h5_dataloader.md --------------------------------------------------------------------------
    Run("h5_dataloader.md", 2, prelude="import numpy as np\n", slow=True),
    Run("h5_dataloader.md", 3, needs="torchvision"),
    Run("h5_dataloader.md", 4, prelude="import numpy as np\n", slow=True),
    # rank_cached_h5_dataloader.md --------------------------------------------------------------
    Run(
        "rank_cached_h5_dataloader.md",
        4,
        prelude=f"import os\n{IMAGE_MODEL}criterion = nn.CrossEntropyLoss()\nnum_epochs = 1\n",
        ranks=2,
        cuda=True,
        # The snippet builds a plain DataLoader(num_workers=4), which forks (Python 3.12's
        # default) after init_process_group("nccl") and set_device: Python 3.12 warns once per
        # worker that the process is multi-threaded. The threads are CUDA's and NCCL's, not
        # ours: ours stop before every fork (tests/io/test_threads.py proves none is alive).
        # At the forks of a CUDA-initialised test process on the H200 machine (2026-11-27,
        # /proc/<pid>/task/*/comm recorded by an at-fork hook) the extra threads were
        # cuda-EvtHandlr and cuda0000… (CUDA's driver), jemalloc_bg_thd and unnamed native
        # pool threads. Loaders we build pick forkserver there; for this plain DataLoader
        # docs/rank_cached.md says what to pass.
        rank_ignore=("This process (pid=",),
    ),
    Run(
        "rank_cached_h5_dataloader.md",
        4,
        "cpu-train",
        prelude=f"import datetime\nimport os\n{IMAGE_MODEL}criterion = nn.CrossEntropyLoss()\n"
        "num_epochs = 1\n",
        fills=(
            ("# ... rest of training loop", "loss.backward()  # filled in: the training step"),
            # a hang becomes an error after 60 s instead of gloo's default 30 minutes
            ('backend="gloo"', 'backend="gloo", timeout=datetime.timedelta(seconds=60)'),
        ),
        ranks=2,
        cuda=True,
        cpu=True,
    ),
    Run(
        "rank_cached_h5_dataloader.md",
        5,
        prelude="import numpy as np\n"
        "from nn_handler.dataloaders.rank_cached_h5_dataloader import RankMemCachedH5Dataset\n",
    ),
    *(
        Run(
            "rank_cached_h5_dataloader.md",
            6,
            variant,
            prelude="import numpy as np\nimport torch\nfrom torch.utils.data import DataLoader\n"
            "from nn_handler.dataloaders.rank_cached_h5_dataloader import (\n"
            "    EpochShuffleSampler, RankMemCachedH5Dataset)\n"
            'model = torch.nn.Linear(32, 4).to("cuda" if torch.cuda.is_available() else "cpu")\n',
            cuda=True,
            cpu=cpu,
            slow=True,
        )
        for variant, cpu in (("", False), ("cpu", True))
    ),
    # combined_hdf5_dataset_readme.md -----------------------------------------------------------
    Run("combined_hdf5_dataset_readme.md", 1),
    Run("combined_hdf5_dataset_readme.md", 2, prelude=COMBINED),
    *(
        Run(
            "combined_hdf5_dataset_readme.md",
            3,
            variant,
            prelude=COMBINED
            + "model = nn.Sequential(nn.Flatten(), nn.Linear(2 * T, T * 3)).to(device)\n"
            "def criterion(outputs, targets, weights):\n"
            "    return (weights * (outputs - targets.flatten(1)).pow(2).mean(1)).mean()\n"
            "num_epochs = 1\n",
            # The snippet's persistent workers with pin_memory=True end when its iterator is
            # collected. Left to a later collection, torch's shutdown of that pair can close a
            # queue's pipe twice ("Bad file descriptor" in a QueueFeederThread, pytorch#91252's
            # code path; seen on the H200 machine in the next test's teardown, and at exit
            # before our fork changes): end them here, inside this test.
            epilogue="del dataloader\nimport gc\ngc.collect()\n",
            cuda=True,
            cpu=cpu,
            slow=True,
        )
        for variant, cpu in (("", False), ("cpu", True))
    ),
    *(
        Run(
            "combined_hdf5_dataset_readme.md",
            4,
            variant,
            prelude="import os\n" + COMBINED + "num_epochs = 1\n"
            "class MyModel(nn.Sequential):\n"
            "    def __init__(self):\n"
            "        super().__init__(nn.Flatten(), nn.Linear(2 * T, 3))\n",
            fills=(("# ... training code", "model(inputs).mean().backward()  # filled in"),),
            epilogue='train_distributed(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))\n',
            ranks=2,
            cuda=True,
            cpu=cpu,
        )
        for variant, cpu in (("train", False), ("cpu-train", True))
    ),
    Run(
        "combined_hdf5_dataset_readme.md",
        5,
        prelude=COMBINED + "dataloader = DataLoader(\n"
        "    CombinedHDF5Dataset(hdf5_files, dtype=torch.float16), batch_size=16, drop_last=True\n"
        ")\n"
        'model = nn.Sequential(nn.Flatten(), nn.Linear(2 * T, T * 3)).to("cuda")\n'
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "criterion = nn.MSELoss()\n"
        "# the snippet uses `targets` without defining it: one fixed batch of them\n"
        'targets = torch.zeros(16, T * 3, device="cuda")\n',
        cuda=True,
        # torch deprecates torch.cuda.amp.GradScaler / autocast for torch.amp: torch's warning,
        # not ours, and the seed's code still works
        ignore=("ignore:.*torch.cuda.amp.*:FutureWarning",),
    ),
    Run(
        "combined_hdf5_dataset_readme.md",
        6,
        prelude=COMBINED + "dataset = CombinedHDF5Dataset(hdf5_files)\n",
        # the snippet asks for spawn workers: the dataset must survive pickling
        epilogue="import pickle\n"
        "assert len(pickle.loads(pickle.dumps(optimal_dataloader.dataset))) == len(dataset)\n",
    ),
    Run("combined_hdf5_dataset_readme.md", 7, prelude=COMBINED),
    Run(
        "combined_hdf5_dataset_readme.md",
        8,
        prelude=COMBINED + "dataset = CombinedHDF5Dataset(hdf5_files)\n",
    ),
    Run(
        "combined_hdf5_dataset_readme.md",
        9,
        prelude=COMBINED + "files = hdf5_files\nrank = 0\n",
        cuda=True,  # world_size = torch.cuda.device_count(): 0 without a GPU
    ),
    Run(
        "combined_hdf5_dataset_readme.md",
        10,
        prelude=COMBINED + "dataset = CombinedHDF5Dataset(hdf5_files)\n",
    ),
    Run(
        "combined_hdf5_dataset_readme.md",
        11,
        prelude=COMBINED + "dataset = CombinedHDF5Dataset(hdf5_files)\n",
    ),
    # blog_h5_per_sample_datasets.md ------------------------------------------------------------
    Run(
        "blog_h5_per_sample_datasets.md",
        0,
        # the blog's first attempt uses the imports of its second snippet
        prelude="import h5py\nimport torch\nfrom torch.utils.data import Dataset\n",
        slow=True,
        fork=True,
    ),
    Run("blog_h5_per_sample_datasets.md", 1),
    Run("blog_h5_per_sample_datasets.md", 2, after=(1,), slow=True, fork=True),
]


def _snippets(seed: str) -> list[Snippet]:
    return python_blocks(SEEDS / seed)


def _code(snippet: Snippet, run: Run) -> str:
    code = snippet.code
    for old, new in (*IMPORTS, *(CPU_PORT if run.cpu else ())):
        code = code.replace(old, new)
    for old, new in run.fills:  # written against the ported code
        assert old in code, f"{run.name}: nothing to fill at {old!r}"
        code = code.replace(old, new)
    return code


def _pieces(run: Run) -> list[tuple[str, str, int]]:
    """``(code, file name, first line)`` to run in order, in one namespace."""
    snippets = _snippets(run.seed)
    pieces = [(run.prelude, f"<prelude of {run.name}>", 0)]
    for index in (*run.after, run.index):
        s = snippets[index]
        pieces.append(
            (_code(s, run if index == run.index else Run(run.seed, index)), str(s.source), s.line)
        )
    pieces.append((run.epilogue, f"<epilogue of {run.name}>", 0))
    return pieces


def _param(run: Run) -> Any:
    marks: list[Any] = []
    if run.slow or run.ranks > 1:
        marks.append(pytest.mark.slow)
    if run.ranks > 1:
        marks.append(pytest.mark.ddp)
    if run.cuda and not run.cpu:
        marks += [
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="written for a GPU"),
        ]
    if run.fork and multiprocessing.get_start_method() != "fork":
        # spawn / forkserver workers import the dataset class by name; one defined by a snippet
        # run through exec has none (PicklingError: attribute lookup H5Dataset on builtins)
        marks.append(pytest.mark.skip(reason="the snippet's own Dataset needs fork workers"))
    if run.xfail:
        marks.append(pytest.mark.xfail(strict=True, reason=run.xfail, raises=run.raises))
    marks += [pytest.mark.filterwarnings(f) for f in run.ignore]
    return pytest.param(run, id=run.name, marks=marks)


@pytest.fixture(scope="module")
def seed_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("seed_files")
    write_seed_files(folder)
    return folder


@pytest.mark.filterwarnings(*(f"ignore:{re.escape(m)}" for m in MACHINE_WARNINGS))
@pytest.mark.parametrize("run", [_param(run) for run in RUNS])
def test_seed_snippet(
    run: Run, seed_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if run.needs:
        pytest.importorskip(run.needs, reason=f"{run.name} imports {run.needs}")
    folder = tmp_path / "work"
    shutil.copytree(seed_files, folder)
    monkeypatch.chdir(folder)
    try:
        _execute(run, folder)
    except run.raises as exc:
        if run.xfail and not re.search(run.match, str(exc)):
            pytest.fail(f"{run.name} fails, but not as its xfail says: {exc}")
        raise


def _execute(run: Run, folder: Path) -> None:
    if run.ranks == 1:
        namespace: dict[str, Any] = {"__name__": "__snippet__"}
        for code, filename, line in _pieces(run):
            exec(compile("\n" * line + code, filename, "exec"), namespace)
        return
    on_gpus = run.cuda and not run.cpu
    ranks = min(run.ranks, torch.cuda.device_count()) if on_gpus else run.ranks
    results = run_ddp(
        run_in_rank,
        ranks,
        folder / "ranks",
        _pieces(run),
        str(folder),
        run.keep,
        run.rank_ignore,
        timeout=DDP_TIMEOUT,
    )
    assert [r["warnings"] for r in results] == [[]] * ranks


@pytest.mark.parametrize("key", sorted(NOT_CODE), ids=lambda key: f"{key[0]}#{key[1]}")
def test_not_code_is_not_python(key: tuple[str, int]) -> None:
    snippet = _snippets(key[0])[key[1]]
    with pytest.raises(SyntaxError):
        compile(snippet.code, str(snippet.source), "exec")


def test_every_seed_snippet_is_listed():
    found = {(p.name, s.index) for p in SEEDS.glob("*.md") for s in python_blocks(p)}
    listed = {(run.seed, run.index) for run in RUNS} | set(NOT_CODE)
    assert found == listed
    assert len(found) == 29  # 3 blog, 12 combined, 2 overview, 5 h5_dataloader, 7 rank-cached
