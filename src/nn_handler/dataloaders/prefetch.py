"""DevicePrefetcher: batches arrive on the GPU already, copied ahead on a side stream.

``for x, y in DevicePrefetcher(loader, "cuda")`` copies the next ``depth`` batches to the device
while the model works on the current one: host tensors already pinned (a worker's batch ring,
pinned in place once) are copied as they are, other host tensors are staged through reused
pinned buffers (so the copy is a true asynchronous DMA even when the loader does not pin); the
copies run on a side CUDA stream, each host batch is kept until its copies have finished (its
ring slot is not handed back to the worker while the GPU still reads it), and batches are handed
over with the proper synchronisation: the consuming stream waits for the copy, and
``record_stream`` keeps the caching allocator from reusing a batch's memory while the consumer
still reads it. Tensors nested in tuples, lists, named tuples and dicts are moved; other
values pass through unchanged.

On a machine without CUDA (or with ``device="cpu"``) the prefetcher simply iterates the loader,
so the same training script runs everywhere.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Iterator, Sized
from typing import Any, cast

import torch
from torch.utils.data import DataLoader

from .._devices import check_device
from .._validate import check_prefetch
from ._contracts.protocols import set_epoch_once
from ._tensors.structure import move as move  # used by _training and tests

__all__ = ["DevicePrefetcher"]

_LOG = logging.getLogger(__name__)
_NO_CUDA_LOGGED = {"done": False}


class DevicePrefetcher:
    """Iterate ``loader`` with every batch already on ``device``, ``depth`` batches ahead.

    Args:
        loader: Any iterable of batches (a ``DataLoader``, ``batched_loader``, a list, …).
        device: Target device. None picks ``"cuda"`` when available, else ``"cpu"`` (logged
            once).
        depth: Batches in flight ahead of the one being used (1 to 4,096).

    Raises:
        ValueError: ``device`` is not a device.
        RuntimeError: a CUDA device was asked for and CUDA is not available.

    Example:
        >>> for x, y in DevicePrefetcher(batched_loader(ds, 256, shuffle=True), "cuda"):
        ...     loss = model(x).sum()
    """

    def __init__(
        self, loader: Iterable[Any], device: str | torch.device | None = None, *, depth: int = 2
    ) -> None:
        self.loader = loader
        self.device = _resolve(device)
        self.depth = check_prefetch("depth", depth)

    def __len__(self) -> int:
        if not hasattr(self.loader, "__len__"):
            raise TypeError(
                f"{type(self.loader).__name__} has no len(); neither has its prefetcher"
            )
        return len(cast(Sized, self.loader))

    def set_epoch(self, epoch: int) -> None:
        """Forward ``set_epoch`` to the loader's batch sampler / sampler when it has one."""
        loader = self.loader
        if isinstance(loader, DataLoader):
            set_epoch_once((loader.batch_sampler, loader.sampler), epoch)
        else:  # another prefetcher, or any iterable that forwards set_epoch itself
            set_epoch_once((loader,), epoch)

    def __iter__(self) -> Iterator[Any]:
        if self.device.type == "cuda":
            return self._cuda_batches()
        return (move(batch, lambda t: t.to(self.device)) for batch in self.loader)

    def _cuda_batches(self) -> Iterator[Any]:
        stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        staging = _PinnedPool()
        ahead: deque[Any] = deque()
        held = _HostBatches()
        source = iter(self.loader)

        def fetch() -> None:
            batch = next(source, _END)
            if batch is _END:
                return
            with torch.cuda.stream(stream):
                ahead.append(move(batch, lambda t: _to_device(t, self.device, stream, staging)))
            held.keep(batch, stream)

        for _ in range(self.depth):
            fetch()
        while ahead:
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_stream(stream)  # the copies of this batch happened on the side stream
            batch = ahead.popleft()
            _record_all(batch, consumer)
            fetch()
            yield batch

    def __repr__(self) -> str:
        return f"DevicePrefetcher({self.loader!r}, device={str(self.device)!r}, depth={self.depth})"


_END = object()


class _HostBatches:
    """Host batches whose copies to the device may still be running, kept alive until done.

    A copy from pinned memory is asynchronous: its source must outlive it. torch guarantees
    that for its own pinned allocations, not for memory pinned in place (a worker's batch ring,
    a rank cache): a slot freed while its copy runs could be refilled under it.
    """

    def __init__(self) -> None:
        self._held: deque[tuple[Any, Any]] = deque()

    def keep(self, batch: Any, stream: Any) -> None:
        while self._held and self._held[0][0].query():
            self._held.popleft()
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(stream)
        self._held.append((event, batch))


class _PinnedPool:
    """Reusable pinned host buffers; one is reused once the copy that read it has finished."""

    def __init__(self) -> None:
        self._free: dict[tuple[torch.dtype, int], list[tuple[torch.Tensor, Any]]] = {}

    def stage(self, tensor: torch.Tensor) -> torch.Tensor:
        key = (tensor.dtype, tensor.numel())
        buffers = self._free.setdefault(key, [])
        ready = [i for i, (_, event) in enumerate(buffers) if event.query()]
        if ready:
            buf = buffers.pop(ready[0])[0]
        else:
            buf = torch.empty(tensor.numel(), dtype=tensor.dtype, pin_memory=True)
        staged = buf.view(tensor.shape)
        staged.copy_(tensor)
        return staged

    def release(self, staged: torch.Tensor, stream: Any) -> None:
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(stream)  # the buffer is free once the device copy queued before it ran
        key = (staged.dtype, staged.numel())
        self._free.setdefault(key, []).append((staged.view(-1), event))


def _to_device(
    tensor: torch.Tensor, device: torch.device, stream: Any, staging: _PinnedPool
) -> torch.Tensor:
    if tensor.device.type != "cpu":
        return tensor.to(device, non_blocking=True)
    if tensor.is_pinned():
        return tensor.to(device, non_blocking=True)
    staged = staging.stage(tensor.contiguous())
    result = staged.to(device, non_blocking=True)
    staging.release(staged, stream)
    return result


def _record_all(batch: Any, stream: Any) -> None:
    def record(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type == "cuda":
            tensor.record_stream(stream)  # allocated on the side stream, used on the consumer's
        return tensor

    move(batch, record)


def _resolve(device: str | torch.device | None) -> torch.device:
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if not _NO_CUDA_LOGGED["done"]:
            _NO_CUDA_LOGGED["done"] = True
            _LOG.info("DevicePrefetcher: CUDA is not available; batches stay on the CPU")
        return torch.device("cpu")
    try:
        return check_device("device", device)
    except RuntimeError as exc:
        raise RuntimeError(
            f"{exc}; pass device=None to use the GPU when there is one and the CPU otherwise"
        ) from exc
