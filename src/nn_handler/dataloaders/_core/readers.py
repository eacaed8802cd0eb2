"""RowReaderDataset: a chunked dataset read through ``RowReader`` s, which can read ahead."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from ..._io import Reader, RowReader, adjacent_chunks, as_index_array
from .._tensors.tensors import to_tensor
from .._transport import in_worker_process
from .chunks import ChunkedDataset, ChunkParts

__all__ = ["RowReaderDataset"]

T_co = TypeVar("T_co", covariant=True)


class RowReaderDataset(ChunkedDataset[T_co]):
    """A ``ChunkedDataset`` whose parts are ``RowReader`` s: it reads ahead (``ReadsAhead``).

    Subclasses write ``_row_readers()`` (instead of ``_chunk_parts()``) and, when samples pass
    through Python callables, ``_transforms()``.
    """

    @abstractmethod
    def _row_readers(self) -> list[RowReader]:
        """The reader of every key's chunks: windows, readahead and caches are theirs."""

    def _chunk_parts(self) -> Sequence[ChunkParts]:
        return self._row_readers()

    def _transforms(self) -> Sequence[Callable[[Any], Any] | None]:
        """The per-sample Python callables reads run (None where unset)."""
        return ()

    @property
    def adjacent_chunks(self) -> int:
        """Adjacent chunks per block of ``ChunkShuffleSampler``'s default (1 for a local file).

        For a URL, runs of neighbouring chunks (up to about 1 MB decoded, at most 8 chunks) are
        shuffled as one block, so one request fetches them (see ``docs/remote.md``).
        """
        if not any(source.is_remote for source in self._sources()):
            return 1
        return adjacent_chunks(self.window_cache_nbytes(None, 1))

    def wait_causes(self, random_order: bool) -> list[str]:
        """What makes batches of this dataset slow to read, each with its fix (``wait_advice``).

        Args:
            random_order: The loader draws samples in a random order (not chunk by chunk).
        """
        causes = []
        if random_order:
            causes += [c for r in self._row_readers() if (c := r.random_order_cost())]
        for source in self._sources():
            if source.is_remote and source.options.cache_dir is None:
                causes.append(
                    f"{source.path!r} is read over the network without a cache: every epoch "
                    "fetches its chunks again; pass cache_dir= (a node-local folder every "
                    "process of the node shares, see docs/remote.md)"
                )
        return causes

    @property
    def reads_release_gil(self) -> bool:
        """True when batches are read outside the GIL.

        Every key is memory-mapped or decoded by our codecs, and there are no transforms:
        ``batched_loader(worker_mode="auto")`` then serves batches from threads.
        """
        no_transforms = all(fn is None for fn in self._transforms())
        return no_transforms and all(r.releases_gil for r in self._row_readers())

    @property
    def readahead_rows(self) -> int:
        """Rows ``batched_loader`` announces ahead of reading them (see ``read_ahead``)."""
        return max(reader.readahead_rows for reader in self._row_readers())

    def read_ahead(self, indices: Any) -> None:
        """Start decoding, in the background, the chunks a coming batch ``indices`` needs.

        ``batched_loader`` calls this a window ahead when batches are read in this process
        (``num_workers=0`` or worker threads), so decoding overlaps serving earlier batches.
        """
        for reader in self._row_readers():
            reader.read_ahead(indices)

    def _read_rows(
        self, reader: Reader, indices: Any, cast: np.dtype[Any] | None, *, leaves: bool = True
    ) -> torch.Tensor:
        """Rows ``indices`` of ``reader`` as one tensor (cast to ``cast``), read in place.

        ``leaves``: the tensor is the batch that leaves this process as it is. Numbers are then
        read (and cast) straight into ``_output_buffer``: in a DataLoader worker process the
        batch leaves without another copy. Otherwise (samples torch's collate stacks again, a
        batch a transform stacks again) they are read into this process's own memory.

        Raises:
            MemoryError: in a worker process, ``/dev/shm`` has no room for the batch.
        """
        final = reader.dtype if cast is None else cast
        if leaves and in_worker_process() and final.isnative and final.kind in "biuf":
            idx = as_index_array(indices, reader.length)
            batch = self._output_buffer((idx.size, *reader.row_shape), final)
            if batch is not None:
                out = batch.numpy()
                if final == reader.dtype:
                    reader.read(idx, out=out)
                else:
                    np.copyto(out, reader.read(idx), casting="unsafe")
                return batch
        return to_tensor(reader.read(indices), cast)
