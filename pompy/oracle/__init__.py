"""The Fortran oracle: pom2k in Fortran (reference_fortran/), built by f2py.

``Oracle().call("advq(q2b,q2,uf,a,c)", state, params)`` runs one routine on
a state dict; ``pompy.oracle.build`` compiles and caches the extension.
"""
from pompy.calls import parse_call
from pompy.oracle.adapter import Oracle
from pompy.oracle.build import OracleBuildError, load

# pompy.oracle.build is the build module (build.build() compiles).
__all__ = ["Oracle", "OracleBuildError", "load", "parse_call"]
