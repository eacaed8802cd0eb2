"""The Python blocks of docs/sparse.md run, in order, against small files they name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.sparse_files import ad, matrix, obs_frame, pd, write_10x

DOC = Path(__file__).resolve().parents[2] / "docs" / "sparse.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


@pytest.mark.slow  # DataLoader workers
def test_doc_snippets_run(tmp_path, monkeypatch):
    adata = ad.AnnData(
        matrix(600, seed=2),
        obs=obs_frame(600, 2),
        var=pd.DataFrame(index=[f"gene{j}" for j in range(45)]),
    )
    adata.write_h5ad(tmp_path / "pbmc.h5ad", compression="gzip")
    write_10x(tmp_path / "filtered_feature_bc_matrix.h5")
    monkeypatch.chdir(tmp_path)  # the snippets use the file names a user would
    blocks = BLOCK.findall(DOC.read_text())
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "docs_sparse"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["handler"].global_step > 0
    assert namespace["small"].shape == (600 + 157, 3)
