"""Packaging glue; the metadata is in pyproject.toml.

Ships reference_fortran/*.f90 (which stays at the top of the repository) inside
the package as pompy/_fortran/, so that an installed pompy can build the oracle
(pompy/oracle/build.py); every pompy package is found as before.
"""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["pompy", "pompy.*"]) + ["pompy._fortran"],
    package_dir={"pompy._fortran": "reference_fortran"},
    package_data={"pompy._fortran": ["*.f90"]},
)
