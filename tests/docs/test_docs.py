"""The README and the documentation site: every code block runs as written, the site builds strictly
with no network, the pages speak of the software (no issue numbers, no work log), and the README's
picture says what the stored results say."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from tests.docs.blocks import NOT_RUN, ROOT, RUN, SHOWN, blocks, pages

PAGES = pages()
RUNNABLE = [p for p in PAGES if any(b.lang in RUN and b.not_run is None for b in blocks(p))]


def _id(p: Path) -> str:
    return str(p.relative_to(ROOT))


def test_every_block_says_what_it_is():
    """A block runs (sh, bash, python), is marked not run for an allowed reason, or shows output."""
    bad = []
    for page in PAGES:
        for b in blocks(page):
            if b.not_run is not None and (b.not_run not in NOT_RUN or b.lang not in RUN):
                bad.append(f"{b.where}: 'not run: {b.not_run}' (reasons: {', '.join(NOT_RUN)}; only on code)")
            elif b.lang not in RUN and b.lang not in SHOWN:
                bad.append(f"{b.where}: a block in {b.lang or 'no language'!r} (run: {RUN}; shown: {SHOWN})")
    assert not bad, "\n".join(bad)


def test_the_quick_starts_run():
    """The README's first screen: a CLI quick start and a Python one, both run (not marked)."""
    readme = [b for b in blocks(ROOT / "README.md") if b.not_run is None]
    assert any(b.lang == "sh" and "seqpack train-tokenizer my_corpus/" in b.code for b in readme)
    assert any(b.lang == "python" and "pack_dataset" in b.code and "SFTTrainer" in b.code for b in readme)


def _run_page(page: Path, root: Path) -> subprocess.CompletedProcess:
    """Run one page's blocks in a fresh directory holding the data the pages name."""
    from tests.docs.workdir import make_workdir

    work = make_workdir(root / "work")
    cuda = importlib.util.find_spec("torch") is not None and _cuda()
    todo = [
        {"where": b.where, "lang": "python" if b.lang == "python" else "sh", "code": b.code}
        for b in blocks(page)
        if b.lang in RUN and (b.not_run is None or (b.not_run == "needs a GPU" and cuda))
    ]
    (root / "blocks.json").write_text(json.dumps(todo), encoding="utf-8")
    bindir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MPLBACKEND": "Agg",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "tests.docs.runner", str(root / "blocks.json")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="session")
def page_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The selected pages, run two at a time (each is mostly one process waiting on another's start-up
    and imports, so two share this machine's two cores): page -> a future of its completed process."""
    from concurrent.futures import ThreadPoolExecutor

    selected = [
        cast(Path, item.callspec.params["page"])
        for item in request.session.items
        if isinstance(item, pytest.Function) and hasattr(item, "callspec") and "page" in item.callspec.params
    ]
    if importlib.util.find_spec("trl") is None:
        selected = []  # each test skips: the pages use every extra
    pool = ThreadPoolExecutor(max_workers=2)
    runs = {page: pool.submit(_run_page, page, tmp_path_factory.mktemp("page")) for page in selected}
    yield runs
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("page", RUNNABLE, ids=_id)
def test_every_block_runs(page: Path, page_runs):
    """Each page's blocks, in order, as a reader would run them (the GPU ones only on a GPU)."""
    pytest.importorskip("trl")  # the pages use every extra
    p = page_runs[page].result()
    assert p.returncode == 0, f"{_id(page)}: a block failed\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


#: what a site built from the docs extra alone lacks: the extras' packages, blocked in the build
NOT_IN_THE_DOCS_EXTRA = ("torch", "transformers", "trl", "datasets", "accelerate", "matplotlib", "ray", "torchdata")


def test_the_site_builds_strictly(tmp_path: Path):
    """``mkdocs build --strict`` from the docs extra alone (torch, transformers, matplotlib and ray
    blocked in the build): broken links, missing pages, unknown API names fail it. Offline: the
    theme loads no web fonts and no plugin fetches. The built HTML: no raw Sphinx role (docstrings
    are Markdown), no list run into its paragraph, and links to pages as files, so the site works
    opened from disk."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install 'seqpack[docs]')")
    pytest.importorskip("mkdocstrings")
    pytest.importorskip("material")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_MKDOCS_2_WARNING": "1"}
    block = "; ".join(f"sys.modules[{m!r}] = None" for m in NOT_IN_THE_DOCS_EXTRA)
    code = f"import sys; {block}; from mkdocs.__main__ import cli; sys.exit(cli())"
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "build",
            "--strict",
            "-q",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-6000:]
    site = tmp_path / "site"
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    assert "seqpack pack" in cli and "--max-len" in cli  # generated from the parsers
    api = (site / "reference" / "api" / "packing.html").read_text(encoding="utf-8")
    assert "pack_lengths" in api  # rendered from the docstrings
    roles = re.compile(r":(class|func|meth|mod|attr|data|obj|exc):`")
    for html in site.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text, html
        assert not roles.search(text), (html, roles.search(text))
        # a list run into its paragraph renders as "text:\n- item" inside one <p>
        assert not re.search(r"<p>[^<]*\n- ", text), html
        # links between pages name files (page.html), never directories (page/), which a browser
        # opening the site from disk shows as a listing
        hrefs = re.findall(r'href="(?!https?:|#|mailto:)([^"]+)"', text)
        assert not [h for h in hrefs if h.split("#")[0].endswith("/")], (
            html,
            [h for h in hrefs if h.endswith("/")][:3],
        )


# "issue 23", "issues 12 and 14", "session 4", "stop 58", "PR 7", "#41", and a numbered log's
# labels: "run 9:", "call 2 (" ... A repository's issue ("pytorch/pytorch#196678") is a citation.
WORK_LOG = re.compile(
    r"(?i)(\b(issues?|sessions?|stops?|PRs?|tickets?)\s*#?\d+"
    r"|(?<![\w/])#\d+\b"
    r"|\b(run|call|round|attempt)\s+#?\d+\s*[:(])"
)


def _user_texts() -> list[tuple[str, str]]:
    texts = [(_id(p), re.sub(r"`[^`\n]*`", " ", p.read_text(encoding="utf-8"))) for p in PAGES]
    from seqpack.cli.main import COMMANDS, build_parser

    texts.append(("seqpack --help", build_parser().format_help()))
    for name in COMMANDS:
        try:
            parser = build_parser(name)
        except ModuleNotFoundError:  # an extra this environment lacks
            continue
        texts.append((f"seqpack {name} --help", parser._subparsers._group_actions[0].choices[name].format_help()))  # type: ignore[union-attr,index]  # argparse's private parts
    return texts


def test_no_issue_numbers_or_work_log():
    found = [f"{where}: {m.group(0)!r}" for where, text in _user_texts() for m in WORK_LOG.finditer(text)]
    assert not found, "user-facing text carries issue numbers or a work log:\n" + "\n".join(found)


def test_the_work_log_check_can_fail():
    for text in ("fixed in issue 23", "issues 12 and 14", "see #41", "run 9: 1.9x", "call 2 (CUDA)"):
        assert WORK_LOG.search(text), text
    for text in ("--steps 20", "pytorch/pytorch#196678", "runs 2 CPU ranks", "in 3 rounds", "the first call"):
        assert not WORK_LOG.search(text), text


def test_each_command_ends_with_an_example_and_its_page():
    from seqpack.cli.main import COMMANDS, build_parser

    for name in ["", *COMMANDS]:
        try:
            parser = build_parser(name or None)
        except ModuleNotFoundError:
            continue
        if name:
            parser = parser._subparsers._group_actions[0].choices[name]
        tail = parser.format_help().rstrip().splitlines()[-3:]
        assert tail[0].strip() == "example:" and "seqpack " in tail[1], (name, tail)
        page = re.fullmatch(r"\s*docs: (docs/\S+\.md)", tail[2])
        assert page and (ROOT / page.group(1)).is_file(), (name, tail)


def test_the_picture_says_what_the_results_say():
    sys.path.insert(0, str(ROOT / "docs" / "_gen"))
    try:
        import figures
    finally:
        sys.path.pop(0)
    stored = json.loads((ROOT / "docs" / "assets" / "speedup.json").read_text(encoding="utf-8"))
    assert stored == figures.figure_data(), "re-run python docs/_gen/figures.py"
    svg = (ROOT / "docs" / "assets" / "speedup.svg").read_text(encoding="utf-8")
    for bar in stored:  # the labels drawn are the numbers stored
        assert f"{bar['speedup']:.2f}x" in svg, bar


def test_the_readme_links_resolve():
    """The README is read on the repository's page, outside the site: its links are paths there."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert len(links) >= 10
    broken = [
        ln for ln in links if not ln.startswith(("http://", "https://", "#")) and not (ROOT / ln.split("#")[0]).exists()
    ]
    assert not broken, broken


def test_the_readme_fits_two_minutes():
    """A first page, not a manual: about 200 lines at most."""
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200
