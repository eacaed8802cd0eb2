"""Bytes and rows from HDF5: the only place that talks to h5py, and free of torch.

This package's names below are its face: every module outside ``_io`` imports from here,
never from a module inside (``tests/test_layers.py`` checks it), so what is inside may move
without the layers above knowing. Each name is imported with its module when first asked for
(``nn_handler/_lazy.py``).

Inside:

* ``storage/``: bytes: the byte sources (local files, URLs and their node cache), what
  identifies a file's version, the node-shared memory regions and their locks.
* ``file/``: the HDF5 file: ``H5Source`` (opened lazily per process), the options a dataset
  opens it with, its filters, strings and types, and the layout checked once against the file.
* ``chunks/``: the one chunk engine: the chunk table, the codec pipeline, the window of decoded
  chunks, the node's decoded copy and the decode pool.
* ``rows/``: ``RowReader`` (rows for a batch of indices, read the cheapest correct way, picked
  once in ``rows/choice.py``), keys, the kind of sample a dtype makes, the ``WindowPlan`` a loader
  hands down, and following a growing file.
* ``formats/``: what is not rows of one dataset: whole datasets as samples, attributes, groups,
  sparse matrices.
* ``codec_registry``: every HDF5 filter as one record (id, name, decoder, encoder, levels).
* ``errors``, ``process`` (``PerProcess``, the one new-process guard), ``indices``, ``notices``
  and ``platform`` (what the operating system offers) serve all.
"""

import typing

from .._lazy import exports_declared

if typing.TYPE_CHECKING:  # (read by _lazy.exports_declared: the table of names to modules)
    from .chunks.decoded import decoded_budget
    from .chunks.decoders import Step
    from .chunks.order_cost import random_order_advice, rewrite_command
    from .chunks.pool import decode_threads, loader_workers, run_parallel, set_decode_threads
    from .codec_registry import CODECS, SHUFFLE, FilterCodec, written
    from .errors import (
        CorruptFileError,
        DataFileError,
        ExternalDataError,
        FileChangedError,
        MissingFilterError,
        RemoteAccessError,
        RemoteReadError,
    )
    from .file.filters import FilterInfo, check_filters_at, filters_of
    from .file.options import FileOptions, LockingMode, resolve_file_options
    from .file.paths import check_paths
    from .file.source import H5Source, close_inherited_sources, dataset_keys, load_plugins
    from .file.strings import (
        BYTES,
        Where,
        as_bytes_array,
        check_encoding,
        decode_strings,
        in_rows,
    )
    from .file.types import is_string_dtype
    from .formats.attrs import LabelReader
    from .formats.members import (
        describe_field,
        group_fingerprint,
        is_dataset_member,
        member_names,
        open_dataset_id,
        open_group,
    )
    from .formats.sparse_csr import ensure_csr_sidecar
    from .formats.sparse_labels import LabelColumn, Strings, merge_labels, read_label
    from .formats.sparse_layout import (
        SparseLayout,
        check_indptr,
        describe_layout,
        detect_layout,
        names_key,
        read_names,
        sparse_layouts,
    )
    from .formats.whole import SampleReader
    from .indices import IndexArray, as_index_array, is_scalar_index, normalize_index, plan_pieces
    from .notices import say_once
    from .platform import BINARY, PIPE_ROOM, SHM_FOLDER, off
    from .process import (
        PerProcess,
        around_fork,
        process_generation,
        process_stamp,
        started_process_alive,
    )
    from .rows.fields import Reader, open_reader, row_reader
    from .rows.follow import current_length, reader_at
    from .rows.keys import FIELD_SEPARATOR, field_key, resolve_key
    from .rows.plan import WindowPlan, block_rows_or_own, grow_cache
    from .rows.reader import RowReader
    from .rows.sample_kinds import SampleKind, sample_kind, unsupported_reason
    from .storage.byte_source import read_at
    from .storage.identity import FileIdentity
    from .storage.node_memory import NAMED, RegionInfo, list_regions
    from .storage.region_sweep import sweep_regions
    from .storage.remote.job_blocks import JobStore, set_job_store
    from .storage.remote.ranges import adjacent_chunks
    from .storage.remote.urls import is_url
    from .storage.shm_folder import folder_owners

exports_declared(__name__)

__all__ = [
    "BINARY",
    "BYTES",
    "CODECS",
    "CorruptFileError",
    "DataFileError",
    "ExternalDataError",
    "FIELD_SEPARATOR",
    "FileChangedError",
    "FileIdentity",
    "FileOptions",
    "FilterCodec",
    "FilterInfo",
    "H5Source",
    "IndexArray",
    "JobStore",
    "LabelColumn",
    "LabelReader",
    "LockingMode",
    "MissingFilterError",
    "NAMED",
    "PIPE_ROOM",
    "PerProcess",
    "Reader",
    "RegionInfo",
    "RemoteAccessError",
    "RemoteReadError",
    "RowReader",
    "SHM_FOLDER",
    "SHUFFLE",
    "SampleKind",
    "SampleReader",
    "SparseLayout",
    "Step",
    "Strings",
    "Where",
    "WindowPlan",
    "adjacent_chunks",
    "around_fork",
    "as_bytes_array",
    "as_index_array",
    "block_rows_or_own",
    "check_encoding",
    "check_filters_at",
    "check_indptr",
    "check_paths",
    "close_inherited_sources",
    "current_length",
    "dataset_keys",
    "decode_strings",
    "decode_threads",
    "decoded_budget",
    "describe_field",
    "describe_layout",
    "detect_layout",
    "ensure_csr_sidecar",
    "field_key",
    "filters_of",
    "folder_owners",
    "group_fingerprint",
    "grow_cache",
    "in_rows",
    "is_dataset_member",
    "is_scalar_index",
    "is_string_dtype",
    "is_url",
    "list_regions",
    "load_plugins",
    "loader_workers",
    "member_names",
    "merge_labels",
    "names_key",
    "normalize_index",
    "off",
    "open_dataset_id",
    "open_group",
    "open_reader",
    "plan_pieces",
    "process_generation",
    "process_stamp",
    "random_order_advice",
    "read_at",
    "read_label",
    "read_names",
    "reader_at",
    "resolve_file_options",
    "resolve_key",
    "rewrite_command",
    "row_reader",
    "run_parallel",
    "sample_kind",
    "say_once",
    "set_decode_threads",
    "set_job_store",
    "sparse_layouts",
    "started_process_alive",
    "sweep_regions",
    "unsupported_reason",
    "written",
]
