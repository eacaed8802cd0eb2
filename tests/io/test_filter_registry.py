"""Each HDF5 filter is registered once, and a codec registered in one place only fails here."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest

from nn_handler._io import filter_ids
from nn_handler._io.chunks import codecs, decoders, plugins
from nn_handler._io.chunks.decoders import BUILTIN, FLETCHER32, Step
from nn_handler._io.file.filters import FILTER_NAMES, filters_of
from nn_handler.rewrite import codecs as rewrite_codecs

DECODED = {*BUILTIN, FLETCHER32, *plugins.PLUGINS}


def test_every_filter_we_decode_has_its_facts() -> None:
    for code in DECODED:
        facts = filter_ids.FILTERS[code]
        assert facts.code == code and facts.name and facts.source
    assert set(FILTER_NAMES) == set(filter_ids.FILTERS)


def test_every_plugin_is_decodable_where_its_library_is_installed() -> None:
    # (this environment has imagecodecs and blosc2: every plugin's availability says yes)
    for code in plugins.PLUGINS:
        assert plugins.decodable(Step(code, (), 4)), filter_ids.name_of(code)
    assert codecs.supported_filters() == DECODED
    assert not plugins.decodable(Step(32013, (), 4))  # zfp: registered facts, no decoder


def test_the_decoders_table_lists_every_decoded_filter() -> None:
    listed = {int(c) for c in re.findall(r"^\| [^|]*\((\d+)\) \|", decoders.__doc__ or "", re.M)}
    assert listed == DECODED


def test_the_codecs_a_rewrite_writes_are_ones_we_decode() -> None:
    written = {
        code for name, code in rewrite_codecs._FILTER_IDS.items() if name in rewrite_codecs.CODECS
    }
    assert written and written <= DECODED
    assert "gzip" in rewrite_codecs.CODECS and filter_ids.DEFLATE in DECODED


@pytest.mark.parametrize("name", ["zstd", "lz4"])
def test_a_rewritten_pipeline_reports_the_registered_name(tmp_path, name: str) -> None:
    pytest.importorskip("hdf5plugin")
    path = tmp_path / "f.h5"
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((10,))
    rewrite_codecs.Codec.for_dtype(name, None, np.dtype("f4")).set_filters(dcpl)
    with h5py.File(path, "w") as f:
        space = h5py.h5s.create_simple((100,))
        h5py.h5d.create(f.id, b"x", h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
        names = [info.name for info in filters_of(f["x"])]
    assert names == ["shuffle", name]
