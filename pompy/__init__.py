"""pompy: a PyTorch port of the Princeton Ocean Model (pom2k) with a Fortran oracle."""

__version__ = "0.1.0"
