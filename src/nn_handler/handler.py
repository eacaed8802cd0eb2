"""NNHandler: the training loop the loaders plug into, on one device or under DDP.

The handler owns the model, optimizer, scheduler, loss, metrics, AMP and DDP; the loaders own
the data. Between them sit the two things users forget: ``set_epoch`` on the sampler every
epoch, and checkpoints that know where in the epoch they were taken.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from ._training import ddp as _ddp
from ._training.batches import BatchFn, BatchSplitter
from ._training.config import (
    build_model,
    check_clip,
    check_flag,
    check_metrics,
    check_train_args,
    note_torchrun,
)
from ._training.device import resolve_precision
from ._training.fit import Fit, Record, RunState, evaluate
from ._training.handler_loaders import build_loader, check_loader_sharding, warn_if_not_sharded
from ._training.persist import load_run, save_run
from ._training.predict import Predictor, check_predict_args
from ._training.slots import Slots
from ._training.step import LossFn, Metric, Trainer
from ._validate import check_callable, check_count, check_seed

__all__ = ["NNHandler"]

_RESERVED_METRICS = ("loss", "samples")


class NNHandler:
    """Trains a model on a dataset, on one device or on many processes with DDP.

    Args:
        model_class: The model's class (or any callable returning an ``nn.Module``); the
            handler builds ``model_class(**model_kwargs)``. A built ``nn.Module`` is accepted
            too (then ``model_kwargs`` must be empty).
        model_kwargs: Keyword arguments for ``model_class``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, or a ``torch.device``. Under DDP,
            ``"cuda"`` becomes ``cuda:<LOCAL_RANK>``.
        use_distributed: Train with ``DistributedDataParallel``; initializes
            ``torch.distributed`` from the torchrun environment when it is not initialized
            yet (``nccl`` on CUDA, ``gloo`` on CPU).
        seed: Seed of the samplers the handler creates (order = f(seed, epoch, rank)).
        mixed_precision: False; True (float16 + grad scaler on CUDA, bfloat16 on CPU);
            ``"fp16"`` (CUDA only) or ``"bf16"``.
        grad_accum_steps: Batches whose gradients add up to one optimizer step.
        grad_clip_norm: Clip the gradients' total norm to this value (None: no clipping).
        input_key: For dict batches: the key of the model's inputs.
        target_key: For dict batches: the key of the targets.
        batch_fn: ``batch -> (inputs, targets)`` for any other batch layout.
        progress: Show a tqdm progress bar (rank 0 only); None: when stderr is a terminal.
        log_fn: Receives one line per epoch and notices (rank 0 only); None: silent.
        ddp_kwargs: Extra ``DistributedDataParallel`` keywords (e.g.
            ``find_unused_parameters=True``).

    Raises:
        RuntimeError: the model fails to build (the cause is chained), CUDA is asked for but
            missing, or ``use_distributed=True`` without a torchrun environment.
        TypeError / ValueError: an argument has the wrong type or value.
    """

    def __init__(
        self,
        model_class: Callable[..., nn.Module] | nn.Module,
        model_kwargs: Mapping[str, Any] | None = None,
        device: str | torch.device = "cpu",
        use_distributed: bool = False,
        *,
        seed: int = 0,
        mixed_precision: bool | str = False,
        grad_accum_steps: int = 1,
        grad_clip_norm: float | None = None,
        input_key: str | None = None,
        target_key: str | None = None,
        batch_fn: BatchFn | None = None,
        progress: bool | None = None,
        log_fn: Callable[[str], None] | None = print,
        ddp_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        check_flag("use_distributed", use_distributed)
        check_flag("progress", progress, optional=True)
        check_callable("log_fn", log_fn)
        self._seed = check_seed("seed", seed)
        self._accumulate = check_count("grad_accum_steps", grad_accum_steps, minimum=1)
        self._clip = check_clip(grad_clip_norm)
        self._splitter = BatchSplitter(input_key, target_key, batch_fn)
        self._owns_group, self.world, self.device = _ddp.join(device, use_distributed, log_fn)
        self._log = log_fn if log_fn is not None and self.world.is_main else _silent
        self.precision = resolve_precision(mixed_precision, self.device)
        self._module = build_model(model_class, model_kwargs).to(self.device)
        self._model: nn.Module = self._module
        self._group: dist.ProcessGroup | None = None
        self._closed = False
        self._close_at_exit = functools.partial(_close_at_exit, weakref.ref(self))
        if use_distributed:
            self._model = _ddp.wrap_ddp(self._module, self.device, dict(ddp_kwargs or {}))
            self._group = _ddp.hold_group(self._model)
            # a script that never calls close() still ends its group before Python shuts down
            atexit.register(self._close_at_exit)
        tty = sys.stderr.isatty() if progress is None else progress
        self._show_progress = self.world.is_main and tty
        self._reset()
        if not use_distributed:
            note_torchrun(self._log)

    def _reset(self) -> None:
        self._slots = Slots(self.precision.make_scaler())
        self.loss_fn: LossFn | None = None
        self.metrics: dict[str, Metric] = {}
        self.train_loader: DataLoader[Any] | None = None
        self.val_loader: DataLoader[Any] | None = None
        self._state = RunState()

    @property
    def model(self) -> nn.Module:
        """The model itself (not the DDP wrapper)."""
        return self._module

    @property
    def epoch(self) -> int:
        """Completed epochs (the epoch in progress, 0-based)."""
        return self._state.epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps over the whole run."""
        return self._state.global_step

    @property
    def history(self) -> list[Record]:
        """One record per completed epoch (see ``train``)."""
        return self._state.history

    # -- configuration ---------------------------------------------------------------------

    def set_train_loader(self, dataset: Any, **dataloader_kwargs: Any) -> DataLoader[Any]:
        """Set the training data: a dataset plus any ``DataLoader`` keyword, or a DataLoader.

        Without ``sampler``/``batch_sampler`` the handler picks a resumable sampler: the
        dataset's own for rank-sharded datasets (equal steps on every rank), a
        ``DistributedEpochSampler`` under DDP, else an ``EpochShuffleSampler``. ``shuffle``
        defaults to True. Returns the loader.

        Raises:
            TypeError: an unknown DataLoader keyword (the message lists the valid ones).
            ValueError: a sampler that splits a rank-sharded dataset across ranks again (e.g.
                torch's ``DistributedSampler`` over a ``RankMemCachedH5Dataset``).
        """
        loader = build_loader(
            dataset, dataloader_kwargs, role="train", world=self.world, seed=self._seed
        )
        check_loader_sharding(loader)
        warn_if_not_sharded(loader, self.world)
        self.train_loader = loader
        return loader

    def set_val_loader(self, dataset: Any, **dataloader_kwargs: Any) -> DataLoader[Any]:
        """Set the validation data (as ``set_train_loader``; ``shuffle`` defaults to False).

        Under DDP each rank evaluates its own unpadded part, so every sample counts once.

        Raises:
            TypeError / ValueError: as ``set_train_loader``.
        """
        loader = build_loader(
            dataset, dataloader_kwargs, role="val", world=self.world, seed=self._seed
        )
        check_loader_sharding(loader)
        self.val_loader = loader
        return loader

    def set_optimizer(self, optimizer_class: Callable[..., Any], **kwargs: Any) -> None:
        """Build ``optimizer_class(model.parameters(), **kwargs)`` (e.g. ``torch.optim.Adam``).

        A scheduler set before is dropped (it was bound to the previous optimizer).
        """
        self._slots.set_optimizer(optimizer_class, self._module.parameters(), kwargs)

    def set_scheduler(
        self,
        scheduler_class: Callable[..., Any],
        *,
        interval: Literal["epoch", "step"] = "epoch",
        **kwargs: Any,
    ) -> None:
        """Build ``scheduler_class(optimizer, **kwargs)``, stepped every epoch or every step.

        ``ReduceLROnPlateau`` steps with the epoch's validation loss (the train loss without
        a validation loader).
        """
        self._slots.set_scheduler(scheduler_class, interval, kwargs)

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer (None until ``set_optimizer``)."""
        return self._slots.optimizer

    @property
    def scheduler(self) -> Any:
        """The learning-rate scheduler, or None."""
        return self._slots.scheduler

    def set_loss_fn(self, loss_fn: LossFn) -> None:
        """Set ``loss_fn(outputs, targets) -> one-element tensor`` (the batch mean)."""
        check_callable("loss_fn", loss_fn, optional=False)
        self.loss_fn = loss_fn.to(self.device) if isinstance(loss_fn, nn.Module) else loss_fn

    def set_metrics(self, metrics: Mapping[str, Metric]) -> None:
        """Set ``{name: fn(outputs, targets) -> batch mean}``, reported as per-sample means."""
        self.metrics = check_metrics(metrics, _RESERVED_METRICS)

    # -- training --------------------------------------------------------------------------

    def train(
        self,
        epochs: int,
        *,
        max_steps: int | None = None,
        checkpoint_path: str | os.PathLike[str] | None = None,
        checkpoint_every_steps: int | None = None,
    ) -> list[Record]:
        """Train until ``epochs`` epochs are complete, validating after each one.

        ``epochs`` counts from the start of the run: after ``load()``, or after a call that
        ``max_steps`` stopped, training continues where it stopped, mid-epoch with exactly
        the samples that epoch had not trained yet, in the same order.

        Args:
            epochs: Total epochs of the run.
            max_steps: Stop once ``global_step`` (optimizer steps of the whole run) reaches
                this, even mid-epoch; ``save()`` then records the position.
            checkpoint_path: Save here after every epoch (and see ``checkpoint_every_steps``).
            checkpoint_every_steps: Also save every this many optimizer steps.

        Returns:
            One record per epoch completed by this call (also appended to ``history``):
            ``epoch``, ``train_loss``, ``train_<metric>``, ``val_loss`` and ``val_<metric>``
            (with a validation loader), ``lr``, ``steps``, ``samples_per_s``, ``time_s``.
        """
        epochs, max_steps, every = check_train_args(
            epochs, max_steps, checkpoint_path, checkpoint_every_steps
        )
        trainer = self._trainer(training=True)
        assert self.train_loader is not None
        path = checkpoint_path
        fit = Fit(
            trainer=trainer,
            train_loader=self.train_loader,
            val_loader=self.val_loader,
            scheduler=self._slots.scheduler,
            interval=self._slots.interval,
            accumulate=self._accumulate,
            epochs=epochs,
            max_steps=max_steps,
            save=None if path is None else lambda: self.save(path),
            save_every=every,
            show_progress=self._show_progress,
            log=self._log,
        )
        return fit.run(self._state)

    def evaluate(self) -> dict[str, float]:
        """Loss and metrics on the validation data: ``{"loss", <metric>…, "samples"}``.

        Under DDP the values cover every validation sample exactly once across ranks.
        """
        trainer = self._trainer(training=False)
        if self.val_loader is None:
            raise RuntimeError("no validation data: call set_val_loader(dataset, ...) first")
        return evaluate(trainer, self.val_loader, self._show_progress)

    def predict(
        self,
        dataset: Any,
        out: str | os.PathLike[str] | None = None,
        *,
        key: str = "predictions",
        batch_size: int = 256,
        num_workers: int = 0,
        **loader_kwargs: Any,
    ) -> Any:
        """The model's output for every sample of ``dataset``, into an HDF5 file or a tensor.

        Runs the model (not the DDP wrapper) in eval mode under ``torch.inference_mode`` (and
        the handler's mixed precision) on each batch's inputs, split from the batch as training
        does (``input_key`` / ``batch_fn``; a batch without targets is all inputs).

        With ``out``, writes one HDF5 file (``nn_handler.outputs.H5OutputWriter``): dataset
        ``key`` of shape ``(len(dataset), *one output's shape)`` and the output's dtype, row
        ``i`` the output of sample ``i`` (a tuple or dict of outputs: datasets ``key/0``,
        ``key/1``, ... or ``key/<name>``); chunks of about 1 MiB, gzip level 1 with shuffle;
        attributes naming the model's class and the dataset's files and keys. Under DDP every
        rank calls it on the same dataset and computes a contiguous, chunk-aligned share; every
        rank returns once the whole file is in place, with the same bytes as on one process.
        ``out`` appears only complete. A run killed half way leaves its rows in ``out +
        ".parts"``: the same call again computes only the missing ones (parts of another
        dataset length, model, key or shape are refused).

        Args:
            dataset: A map-style dataset of every sample (not a rank's shard).
            out: The HDF5 file to write; None returns the outputs (one process only).
            key: The dataset's name in the file.
            batch_size: Samples per model call (batches never straddle two ranks' shares).
            num_workers: DataLoader worker processes.
            **loader_kwargs: Other DataLoader keywords (``pin_memory``, ``collate_fn``, ...);
                predict sets the order and batches itself.

        Returns:
            The path of the file; or, with ``out=None``, the outputs stacked: a tensor, or a
            tuple / dict of tensors.

        Raises:
            ValueError: ``out=None`` under DDP; an empty or rank-sharded dataset; parts in
                ``out + ".parts"`` of another output.
            TypeError: an argument of the wrong type, or an unknown DataLoader keyword.
        """
        if self._closed:
            raise RuntimeError("this NNHandler was closed: create a new one to predict")
        options = check_predict_args(self.world, out, key, batch_size, num_workers, loader_kwargs)
        predictor = Predictor(self._module, self._splitter, self.device, self.precision, self.world)
        if out is None:
            return predictor.to_tensors(dataset, batch_size, options)
        return predictor.to_file(dataset, out, key, batch_size, options)

    def _trainer(self, *, training: bool) -> Trainer:
        if self._closed:
            raise RuntimeError(
                "this NNHandler was closed: close() ended its distributed training (the DDP "
                "wrapper, and the process group if the handler started it); create a new "
                "NNHandler to train or evaluate again"
            )
        if self.loss_fn is None:
            raise RuntimeError("no loss function: call set_loss_fn(fn), e.g. nn.CrossEntropyLoss()")
        if training and self.train_loader is None:
            raise RuntimeError("no training data: call set_train_loader(dataset, ...) first")
        if training and self.optimizer is None:
            raise RuntimeError(
                "no optimizer: call set_optimizer(optimizer_class, **kwargs), e.g. "
                "set_optimizer(torch.optim.Adam, lr=1e-3)"
            )
        return Trainer(
            model=self._model,
            module=self._module,
            optimizer=self.optimizer,
            loss_fn=self.loss_fn,
            metrics=self.metrics,
            splitter=self._splitter,
            device=self.device,
            precision=self.precision,
            scaler=self._slots.scaler,
            grad_clip_norm=self._clip,
            world=self.world,
        )

    # -- checkpoints -----------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write a checkpoint: everything ``load()`` needs to continue exactly.

        Model, optimizer, scheduler, AMP scaler, epoch, global step, history, and per rank
        the RNG states and the position in the current epoch (batches trained, sampler
        state, running sums). Under DDP every rank must call it (ranks send their state to
        rank 0, which writes the file). The write is atomic.
        """
        save_run(path, self._module, self._slots, self._state, self.world, self.train_loader)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore a checkpoint written by ``save()``; the next ``train()`` continues from it.

        An optimizer or scheduler set after ``load()`` picks up its saved state when set.
        A mid-epoch checkpoint saved by N processes resumes on M (elastic resume: every
        sample the epoch had not trained comes once, split among the M with equal steps; the
        RNG states of ranks that existed before are restored); with N == M the run continues
        bit-identically. An epoch-end checkpoint loads into any number (the RNG states are then
        left as they are).

        Raises:
            FileNotFoundError: no checkpoint at ``path``.
            CheckpointError: (a ``ValueError``) the file is truncated, damaged or not one of
                ours, or holds a damaged RNG state; checked before anything is restored, so
                the handler is left as it was.
            ValueError: a mid-epoch checkpoint of another number of processes whose sampler
                keeps no position (e.g. ``RandomSampler``; ours all do).
            RuntimeError: the model's parameters do not match (torch lists the keys).
        """
        self._state = load_run(path, self._module, self._slots, self.world, self.device)

    save_checkpoint = save
    load_checkpoint = load

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """End distributed training: drop the DDP wrapper, then destroy the group this handler made.

        Safe to call twice, and after the group was destroyed; a DDP handler not closed is
        closed when Python exits (``atexit``). The wrapper goes first, and also when the group
        is the caller's (who destroys it after this): it holds the group, and a group freed with
        the wrapper, or alive when Python shuts down, can hang or abort the process in torch
        (docs/training.md, "Ending a distributed script").
        """
        atexit.unregister(self._close_at_exit)
        if self._group is not None:
            self._model = self._module
            self._closed = True
            gc.collect()  # DDP sits in a reference cycle: free it while the group is held here
            _ddp.release_group(self._group)
            self._group = None  # a group destroyed already ends here, through its Python handle
        if self._owns_group:
            _ddp.destroy_process_group()
            self._owns_group = False

    def __enter__(self) -> NNHandler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"NNHandler(model={type(self._module).__name__}, device={str(self.device)!r}, "
            f"world={self.world.rank}/{self.world.world_size}, precision={self.precision}, "
            f"epoch={self.epoch}, global_step={self.global_step})"
        )


def _close_at_exit(handler: weakref.ref[NNHandler]) -> None:
    """``close()`` the handler at exit, if it is still alive (the registration holds no handler)."""
    alive = handler()
    if alive is not None:
        alive.close()


def _silent(_line: str) -> None:
    """Drop a log line (ranks other than 0, or ``log_fn=None``)."""
