"""Builds the compiled core (``seqpack._native``, C++17 via pybind11); metadata is in pyproject.toml."""

from glob import glob

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

native = Pybind11Extension(
    "seqpack._native",
    ["csrc/module.cpp"],
    include_dirs=["csrc"],
    depends=sorted(glob("csrc/*.h")),
    cxx_std=17,
    # no FMA contraction: the pricing DP must round exactly as the Python reference does
    extra_compile_args=["-O3", "-ffp-contract=off"],
)

setup(ext_modules=[native], cmdclass={"build_ext": build_ext})
