"""Lightning callbacks: ``DataWaitMonitor`` (the wait for batches), ``H5PredictionWriter``.

``DataWaitMonitor`` logs how much of each epoch the step waited for its batches.

A batch's wait runs from the end of the previous batch (or the epoch's start) to the start of
this one (``on_train_batch_start``): Lightning fetches the batch then (its fetcher also reads one
batch ahead there), moves it to the device (``transfer_batch_to_device``) and runs the hooks in
between. Everything else is the step. Host wall-clock times, like ``WaitMeter``: on CUDA, work
queued by a step and waited for later counts where the host waits for it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter

from ..dataloaders import wait_advice
from ..outputs import H5OutputWriter

__all__ = ["DataWaitMonitor", "H5PredictionWriter"]

_log = logging.getLogger("nn_handler.integrations")


class DataWaitMonitor(Callback):
    """Log the share of each epoch spent waiting for batches, and say why when it is high.

    Logged once per epoch through ``LightningModule.log`` (to the trainer's loggers, and in
    ``trainer.callback_metrics``), averaged over ranks: ``data_wait_share`` and
    ``data_wait_s`` for training, ``val_data_wait_share`` and ``val_data_wait_s`` for
    validation (not during the sanity check). Once per fit, on global rank 0, when a training
    epoch waited more than ``threshold`` of its time after its first batch (start-up), a
    warning on the ``nn_handler`` logger names the likely causes (``wait_advice``).

    Args:
        threshold: Wait share above which the causes are logged (0 to 1).

    Raises:
        ValueError: ``threshold`` is not between 0 and 1.

    Example:
        >>> trainer = L.Trainer(callbacks=[DataWaitMonitor()])
    """

    def __init__(self, threshold: float = 0.2) -> None:
        if not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be a share between 0 and 1, got {threshold!r}")
        self.threshold = float(threshold)
        self._train = _EpochWait()
        self._val = _EpochWait()
        self._advised = False

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """A training epoch starts: its clock too."""
        self._train = _EpochWait()

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """The batch is fetched and on the device: its wait ends."""
        self._train.batch_starts()

    def on_train_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """The step is done: the next batch's wait starts."""
        self._train.batch_ends()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Log the epoch's wait; say why once, when it was high."""
        share, waited = self._train.share(), self._train.wait
        pl_module.log("data_wait_share", share, on_epoch=True, sync_dist=True)
        pl_module.log("data_wait_s", waited, on_epoch=True, sync_dist=True)
        steady = self._train.share(after_first=True)
        if self._advised or steady <= self.threshold or not trainer.is_global_zero:
            return
        self._advised = True
        causes = wait_advice(trainer.train_dataloader or [], pl_module.device)
        _log.warning(
            "nn_handler: the training step waited for its batches %.0f%% of epoch %d (after "
            "its first batch); likely: %s",
            100 * steady,
            trainer.current_epoch + 1,
            "; ".join(causes),
        )

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """A validation pass starts: its clock too."""
        self._val = _EpochWait()

    def on_validation_batch_start(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """The batch is fetched and on the device: its wait ends."""
        self._val.batch_starts()

    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """The step is done: the next batch's wait starts."""
        self._val.batch_ends()

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Log the pass's wait (not the sanity check's)."""
        if trainer.sanity_checking:
            return
        pl_module.log("val_data_wait_share", self._val.share(), on_epoch=True, sync_dist=True)
        pl_module.log("val_data_wait_s", self._val.wait, on_epoch=True, sync_dist=True)


class _EpochWait:
    """The waits of one epoch: from each batch's end (or the start) to the next batch's start."""

    def __init__(self) -> None:
        self.began = self.ended = time.perf_counter()
        self.wait = 0.0
        self.first: float | None = None

    def batch_starts(self) -> None:
        waited = time.perf_counter() - self.ended
        self.wait += waited
        if self.first is None:
            self.first = waited

    def batch_ends(self) -> None:
        self.ended = time.perf_counter()

    def share(self, after_first: bool = False) -> float:
        """Wait over elapsed time up to the last batch's end (without the first batch's wait)."""
        skip = (self.first or 0.0) if after_first else 0.0
        elapsed = self.ended - self.began - skip
        return (self.wait - skip) / elapsed if elapsed > 0 else 0.0


class H5PredictionWriter(BasePredictionWriter):
    """Write ``trainer.predict``'s outputs into one HDF5 file, in dataset order.

    Each batch's predictions go to an ``H5OutputWriter`` (``nn_handler.outputs``) under the
    sample indices Lightning reports (``batch_indices``), on every rank; when prediction ends,
    the ranks make one file together: row ``i`` is sample ``i``'s output, each sample once
    (``DistributedSampler``'s padding repeats are checked and dropped), with the same bytes
    on any number of devices. ``path`` appears only complete; a run that fails keeps its rows
    in ``path + ".parts"``. Predictions that are a tuple or dict of tensors make one dataset
    each (``key/0``, ... or ``key/<name>``). Use ``return_predictions=False`` so Lightning does
    not also keep every output in memory.

    Args:
        path: The HDF5 file to make.
        key: The dataset's name in the file.
        attrs: Attributes of the file (default: the LightningModule's class name).

    Raises:
        ValueError: prediction runs over several dataloaders, or rows are missing at the end.

    Example:
        >>> writer = H5PredictionWriter("preds.h5")
        >>> L.Trainer(callbacks=[writer]).predict(model, loader, return_predictions=False)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        key: str = "predictions",
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(write_interval="batch")
        self.path, self.key, self.attrs = path, key, attrs
        self._writer: H5OutputWriter | None = None

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Open this rank's writer over every sample of the (one) predict dataloader."""
        loaders = trainer.predict_dataloaders
        if isinstance(loaders, Sequence):
            if len(loaders) != 1:
                raise ValueError(
                    f"H5PredictionWriter writes one dataloader's predictions; got {len(loaders)} "
                    "dataloaders: use one H5PredictionWriter per trainer.predict call"
                )
            loaders = loaders[0]
        if loaders is None:
            raise ValueError("H5PredictionWriter found no predict dataloader on the trainer")
        attrs = self.attrs or {"nn_handler.model": type(pl_module).__name__}
        n_rows = len(loaders.dataset)
        self._writer = H5OutputWriter(self.path, n_rows, key=self.key, attrs=attrs)

    def write_on_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Store one batch's predictions under its sample indices."""
        if batch_indices is None:
            raise ValueError(
                "Lightning reported no batch_indices for this batch (a loader with an "
                "iterable dataset?); H5PredictionWriter needs each sample's index"
            )
        assert self._writer is not None, "on_predict_start opens the writer"
        self._writer.write(list(batch_indices), prediction)

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Every rank's rows into the one file (all ranks take part)."""
        if self._writer is not None:
            self._writer.finish()
            self._writer = None
