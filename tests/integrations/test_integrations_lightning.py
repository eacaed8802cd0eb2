"""Lightning: 2 CPU processes (``ddp_spawn``), default ``use_distributed_sampler=True``.

One ``Trainer.fit`` trains on every loader of ``helpers.integrations`` at once (a
``CombinedLoader`` in ``max_size`` mode, so none is cycled) for two epochs. Lightning leaves our
samplers alone (they are ``DistributedSampler``s) and splits the plain loaders itself; the rows
of both ranks together must be the file's rows exactly once per epoch (up to the documented
pads), in another order each epoch. Inside the same processes, after training, a torchdata
``StatefulDataLoader`` stopped mid-epoch must resume exactly.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers.integrations import (
    ROWS,
    SHARD_CASES,
    WHOLE_CASES,
    batch_rows,
    check_exactly_once,
    make_loader,
    quiet,
    stateful_resume_is_exact,
    write_indexed,
)

L = pytest.importorskip("lightning")
pytest.importorskip("torchdata")

from lightning.pytorch.utilities import CombinedLoader  # noqa: E402

from nn_handler.dataloaders import (  # noqa: E402
    ChunkShuffleSampler,
    DistributedEpochSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    RankMemCachedH5Dataset,
)

#: a misuse that is not exactly once: EpochShuffleSampler splits nothing, over a whole dataset
MISUSE = "lazy_epoch_shuffle"
CASES = (*WHOLE_CASES, *SHARD_CASES, MISUSE)


class Recorder(L.LightningModule):
    """Trains nothing; writes the rows each rank saw, per loader and epoch."""

    def __init__(self, path: str, out: str) -> None:
        super().__init__()
        self.path, self.out = Path(path), Path(out)
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.rows: dict[str, list[list[int]]] = {case: [] for case in CASES}
        self.caught: Any = None
        self.record: list[warnings.WarningMessage] = []

    def setup(self, stage: str) -> None:
        self.caught = warnings.catch_warnings(record=True)
        self.record = self.caught.__enter__()
        warnings.simplefilter("always")

    def train_dataloader(self) -> Any:
        loaders = {case: make_loader(case, self.path) for case in CASES if case != MISUSE}
        whole = H5LazyDataset(self.path, "x", "y")
        loaders[MISUSE] = torch.utils.data.DataLoader(
            whole, batch_size=32, sampler=EpochShuffleSampler(len(whole))
        )
        return CombinedLoader(loaders, mode="max_size")

    def on_train_epoch_start(self) -> None:
        for rows in self.rows.values():
            rows.append([])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        combined = batch[0] if isinstance(batch, tuple) else batch
        for case, part in combined.items():
            if part is not None:
                self.rows[case][-1] += batch_rows(part)
        return self.weight.sum() * 0.0

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def on_train_end(self) -> None:
        messages = [str(w.message) for w in self.record]
        self.caught.__exit__(None, None, None)
        result = {
            "rows": self.rows,
            "warnings": messages,
            "resume": resume_checks(self.path),
            "samplers": sampler_types(self.trainer),
        }
        (self.out / f"rank{self.global_rank}.json").write_text(json.dumps(result))


def resume_checks(path: Path) -> dict[str, bool]:
    """torchdata resume under the real world (rank r of 2, detected by the samplers)."""
    whole = H5LazyDataset(path, "x", "y")
    shard = RankMemCachedH5Dataset(path, "x", "y", log_fn=quiet)
    return {
        "dist": stateful_resume_is_exact(
            lambda: DistributedEpochSampler(len(whole), seed=1), whole, batched=True
        ),
        "chunk": stateful_resume_is_exact(
            lambda: ChunkShuffleSampler(whole, seed=2, window_chunks=4), whole, batched=False
        ),
        "rank": stateful_resume_is_exact(lambda: shard.make_sampler(seed=3), shard, batched=True),
        "rank_seed": stateful_resume_is_exact(
            lambda: EpochShuffleSampler(len(shard), 42), shard, batched=False
        ),
    }


def sampler_types(trainer: Any) -> dict[str, str]:
    """The sampler each train loader ended up with (after Lightning's injection).

    A ``ReadaheadSampler`` (the file is compressed) is looked through: its sampler is named,
    with ``+readahead``.
    """
    names = {}
    for case, loader in zip(CASES, trainer.fit_loop._combined_loader.flattened, strict=True):
        sampler, suffix = loader.sampler, ""
        while hasattr(sampler, "ahead"):  # batched_loader's readahead wrapper
            sampler, suffix = sampler.sampler, "+readahead"
        names[case] = type(sampler).__name__ + suffix
    return names


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_lightning_ddp_spawn_exactly_once(tmp_path):
    path = write_indexed(tmp_path / "rows.h5")
    trainer = L.Trainer(
        strategy="ddp_spawn",
        accelerator="cpu",
        devices=2,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    trainer.fit(Recorder(str(path), str(tmp_path)))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for case in (*WHOLE_CASES, *SHARD_CASES):
        for epoch in range(2):
            per_rank = [rank["rows"][case][epoch] for rank in ranks]
            check_exactly_once(per_rank, ROWS, max_repeats=1)  # pads: at most world_size - 1
            assert len(per_rank[0]) == len(per_rank[1]), case  # same steps on both ranks
        for rank in ranks:
            assert rank["rows"][case][0] != rank["rows"][case][1], f"{case}: same order twice"
    for rank in ranks:
        assert rank["resume"] == dict.fromkeys(("dist", "chunk", "rank", "rank_seed"), True)
        # Lightning replaced only the samplers that know nothing of ranks
        assert rank["samplers"]["lazy_plain"] == "DistributedSampler"
        assert rank["samplers"]["dist"] == "DistributedEpochSampler"
        assert rank["samplers"]["chunk"] == "ChunkShuffleSampler+readahead"
        # make_sampler()'s ShardEpochSampler is an EpochShuffleSampler that resumes elastically
        assert rank["samplers"]["rank"] == "ShardEpochSampler"
        assert rank["samplers"]["rank_seed"] == "EpochShuffleSampler"
        ours = [m for m in rank["warnings"] if "Sampler" in m and "Lightning" not in m]
        # the misuse is not silent: each rank is told once, naming the fix
        assert len(ours) == 1 and "DistributedEpochSampler(1003)" in ours[0], ours
        assert sorted(rank["rows"][MISUSE][0]) == list(range(ROWS))  # what the warning says
