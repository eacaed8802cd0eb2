"""Every Python block of README.md and docs/*.md runs as written; the docs hang together.

Each block is one test, named after its file and index (``docs/combined.md#0``), run in a fresh
temporary directory that holds the files the snippets open (``helpers.doc_files``). Blocks on
several processes, or that ask for DataLoader workers, are slow tests. See docs/development.md
for the ``<!-- snippet: ... -->`` options.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.ddp import run_ddp
from helpers.doc_files import write_doc_files
from helpers.snippets import MACHINE_WARNINGS, Snippet, python_blocks, run_in_rank

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# guides whose blocks build on files written by other libraries (pandas, anndata, Pillow) run
# in their own test, in order, against those files; every other page runs here
OWN_RUNNER = {
    "docs/real_files.md": "tests/test_docs_real_files.py",
    "docs/sparse.md": "tests/sparse/test_sparse_docs.py",
    # an S3 server (moto) on 127.0.0.1 holds the object the blocks read
    "docs/remote.md": "tests/remote/test_remote_docs.py",
    # scripts run as `python` or `torchrun` (Lightning's ddp_spawn needs a real __main__)
    "docs/integrations.md": "tests/test_docs_integrations.py",
}
DOC_FILES = [
    README,
    *(
        p
        for p in sorted([*(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "dev").glob("*.md")])
        if p.relative_to(ROOT).as_posix() not in OWN_RUNNER
    ),
]
# pages for contributors: they may link docs/dev/ (the development history); user pages do not
CONTRIBUTOR_PAGES = {"docs/development.md", "docs/design.md"}
SNIPPETS = [snippet for path in DOC_FILES for snippet in python_blocks(path)]
KNOWN_OPTIONS = {"id", "after", "ddp", "slow"}
WORKERS = re.compile(r"num_workers\s*=\s*[1-9]")
DDP_TIMEOUT = 240  # seconds for all ranks of one block, spawn and imports included


def _name(snippet: Snippet) -> str:
    return f"{snippet.source.relative_to(ROOT).as_posix()}#{snippet.index}"


def _by_id(source: Path) -> dict[str, Snippet]:
    return {s.options["id"]: s for s in SNIPPETS if s.source == source and "id" in s.options}


def _chain(snippet: Snippet) -> list[Snippet]:
    """The blocks to run, in order: those named by ``after`` (recursively), then this one."""
    after = snippet.options.get("after")
    return [*_chain(_by_id(snippet.source)[after]), snippet] if after else [snippet]


def _is_slow(snippet: Snippet) -> bool:
    chain = _chain(snippet)
    return any("slow" in s.options or "ddp" in s.options or WORKERS.search(s.code) for s in chain)


def _param(snippet: Snippet) -> Any:
    marks = [pytest.mark.slow] if _is_slow(snippet) else []
    return pytest.param(snippet, id=_name(snippet), marks=marks)


# --- checks that some blocks' results are right, not only that the blocks run -----------------


def _check_one_device(namespace: dict[str, Any], folder: Path, out: str) -> None:
    history = namespace["history"]
    assert len(history) == 3
    assert history[-1]["train_loss"] < history[0]["train_loss"]  # it learns
    assert (folder / "checkpoints" / "run.pt").is_file()
    epochs = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 3  # one log line per epoch


def _check_ddp(ranks: list[dict[str, Any]], folder: Path) -> None:
    histories = [rank["values"]["history"] for rank in ranks]
    assert len(histories[0]) == 2
    per_rank = [[(h["epoch"], h["train_loss"], h["steps"]) for h in hist] for hist in histories]
    assert per_rank[0] == per_rank[1]  # all-reduced: every rank reports the same epochs
    assert [steps for _, _, steps in per_rank[0]] == [4, 4]  # 256 samples / 2 ranks / 32


def _check_predict_ddp(ranks: list[dict[str, Any]], folder: Path) -> None:
    import h5py

    assert [rank["values"]["path"].name for rank in ranks] == ["preds.h5", "preds.h5"]
    with h5py.File(folder / "preds.h5", "r") as f:  # one file, every sample's 10 scores
        assert f["predictions"].shape == (256, 10)
    assert not (folder / "preds.h5.parts").exists()


CHECKS: dict[str, Callable[..., None]] = {
    "handler-one-device": _check_one_device,
    "handler-ddp": _check_ddp,
    "predict-ddp": _check_predict_ddp,
}
KEEP = ("history", "path")  # names a DDP block's ranks send back for its check


@pytest.fixture(scope="module")
def doc_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("doc_files")
    write_doc_files(folder)
    return folder


@pytest.fixture
def workdir(doc_files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh copy of the doc files for every block (blocks write checkpoints, sidecars)."""
    folder = tmp_path / "work"
    shutil.copytree(doc_files, folder)
    monkeypatch.chdir(folder)
    return folder


@pytest.mark.filterwarnings(*(f"ignore:{re.escape(m)}" for m in MACHINE_WARNINGS))
@pytest.mark.parametrize("snippet", [_param(s) for s in SNIPPETS])
def test_snippet(snippet: Snippet, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain = _chain(snippet)
    check = CHECKS.get(snippet.options.get("id", ""))
    if "ddp" in snippet.options:
        codes = [(s.code, str(s.source), s.line) for s in chain]
        ranks = run_ddp(
            run_in_rank,
            int(snippet.options["ddp"]),
            workdir / "ranks",
            codes,
            str(workdir),
            KEEP,
            timeout=DDP_TIMEOUT,
        )
        assert [rank["warnings"] for rank in ranks] == [[]] * len(ranks)
        # the block ends its group as docs/training.md says: no gloo thread outlives it
        assert [rank["gloo_threads"] for rank in ranks] == [[]] * len(ranks)
        if check:
            check(ranks, workdir)
        return
    namespace: dict[str, Any] = {"__name__": "__snippet__"}
    for s in chain:
        exec(s.compiled(), namespace)
    if check:
        check(namespace, workdir, capsys.readouterr().out)


# --- the docs hang together ----------------------------------------------------------------------


def test_every_doc_file_has_snippets_found():
    assert len(SNIPPETS) >= 10  # the parser still sees the blocks (a regex slip would hide all)
    assert {s.source for s in SNIPPETS} >= {README, ROOT / "docs" / "training.md"}


def test_snippet_options_are_valid():
    for snippet in SNIPPETS:
        where = _name(snippet)
        assert set(snippet.options) <= KNOWN_OPTIONS, where
        if "after" in snippet.options:
            assert snippet.options["after"] in _by_id(snippet.source), where
        if "ddp" in snippet.options:
            assert int(snippet.options["ddp"]) >= 2, where
    ids = [(s.source, s.options["id"]) for s in SNIPPETS if "id" in s.options]
    assert len(ids) == len(set(ids)), "snippet ids repeat within a file"
    assert set(CHECKS) <= {name for _, name in ids}, "a check names a block that is gone"


def test_runnable_blocks_hold_no_placeholders():
    for snippet in SNIPPETS:
        tree = ast.parse(snippet.code)
        for node in ast.walk(tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                assert node.value.value is not Ellipsis, f"`...` in {_name(snippet)}"


def test_readme_stays_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_readme_keeps_the_commands_ci_runs():
    text = README.read_text(encoding="utf-8")
    for marker, command in (
        ("demo-command", "nn-handler demo"),
        ("test-command", "python -m pytest"),
    ):
        match = re.search(rf"<!-- {marker} -->\n```bash\n(.+)\n```", text)
        assert match, marker
        assert match.group(1).startswith("python3 -m venv .venv") and command in match.group(1)
    assert 'python -m pytest -m "not slow"' in text


def test_index_lists_every_page():
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w.-]+\.md)(?:#[^)]*)?\)", index))
    pages = {path.name for path in DOC_FILES if path.parent == ROOT / "docs"} - {"index.md"}
    assert pages <= linked, f"docs/index.md does not link {sorted(pages - linked)}"


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_user_pages_do_not_link_the_development_history():
    for path in [README, *(ROOT / "docs").glob("*.md")]:
        if path.relative_to(ROOT).as_posix() in CONTRIBUTOR_PAGES:
            continue
        links = re.findall(r"\]\((?!https?:)([^)\s]+)\)", path.read_text(encoding="utf-8"))
        assert not [t for t in links if "dev/" in t], path.name


def test_relative_links_resolve():
    for path in DOC_FILES:
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\((?!https?:)([^)\s]+)\)", text):
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            assert linked.exists(), f"{path.name}: {target}"
            if anchor:
                assert anchor in _anchors(linked), f"{path.name}: no heading for {target}"


@pytest.mark.parametrize(("page", "runner"), sorted(OWN_RUNNER.items()))
def test_pages_with_their_own_runner_are_run(page, runner):
    assert python_blocks(ROOT / page), f"{page} has no python block"
    assert Path(page).name in (ROOT / runner).read_text()  # the runner reads that page
