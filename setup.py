"""Builds the compiled core (``seqpack._native``, C++17 via pybind11); metadata is in pyproject.toml."""

from glob import glob

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup  # type: ignore[import-untyped]

#: per compiler family: optimise, and no FMA contraction (the pricing DP must round exactly as the
#: Python reference does); MSVC contracts only under /fp:contract, which /fp:precise leaves off
FLAGS = {"msvc": ["/O2", "/fp:precise"], "unix": ["-O3", "-ffp-contract=off"]}


class BuildExt(build_ext):
    """pybind11's build_ext, with each compiler family's own flags (Windows wheels: MSVC)."""

    def build_extensions(self) -> None:
        flags = FLAGS.get(self.compiler.compiler_type, FLAGS["unix"])
        for ext in self.extensions:
            ext.extra_compile_args = [*ext.extra_compile_args, *flags]
        super().build_extensions()


native = Pybind11Extension(
    "seqpack._native",
    ["csrc/module.cpp"],
    include_dirs=["csrc"],
    depends=sorted(glob("csrc/*.h")),
    cxx_std=17,
)

setup(ext_modules=[native], cmdclass={"build_ext": BuildExt})
