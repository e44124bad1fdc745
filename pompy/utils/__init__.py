"""Numerical utilities: gradient-safe elementary operations (safety)."""
