"""The verification certificates (``pompy verify``) the trainer requires.

A certificate is a JSON file under ``$POMPY_HOME/certificates`` (default
``~/.cache/pompy``), named after its key: core, device type, dtype, torch
version and source hash (pompy.provenance.source_hash: any edit to a
core's sources gives a new hash, so an edited core has no certificate
until it is verified again); it holds every figure the verification
measured and whether every check passed. :func:`require_certificate`
finds the one for exactly what is about to run, or says what did not
match and the ``pompy verify`` command to run.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from pompy import provenance
from pompy.errors import InputError
from pompy.oracle.build import pompy_home


def certificate_key(core: str, device: str | torch.device, dtype: str) -> dict[str, str]:
    """What a certificate is for: the core, the device type (cpu, cuda),
    the dtype, the torch version and the source hash."""
    return {"core": core, "device": torch.device(device).type, "dtype": dtype,
            "torch": torch.__version__, "source_hash": provenance.source_hash()}


def certificate_dir() -> Path:
    return pompy_home() / "certificates"


def certificate_path(key: dict[str, str]) -> Path:
    torch_version = key["torch"].replace("+", "_")
    return certificate_dir() / (f"{key['core']}-{key['device']}-{key['dtype']}-torch{torch_version}"
                                f"-{key['source_hash'][:16]}.json")


def write_certificate(key: dict[str, str], checks: list[dict[str, Any]],
                      extra: dict[str, Any] | None = None) -> Path:
    """The certificate of ``key`` with ``checks`` (each a dict with at least
    name, figure, tolerance, passed), written atomically; returns its path."""
    path = certificate_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"key": key, "passed": all(c["passed"] for c in checks), "checks": checks,
            **(extra or {})}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(body, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


def verify_command(core: str, device: str, dtype: str, config: str = "CONFIG") -> str:
    return f"pompy verify --config {config} --core {core} --device {device} --dtype {dtype}"


def require_certificate(core: str, device: str | torch.device, dtype: str,
                        config: str = "CONFIG") -> dict[str, Any]:
    """The passed certificate for exactly this core, device type, dtype,
    torch version and source hash; otherwise InputError naming what did
    not match (against the closest certificate found) and the command to
    run."""
    key = certificate_key(core, device, dtype)
    command = verify_command(core, key["device"], dtype, config)
    path = certificate_path(key)
    if path.is_file():
        body = json.loads(path.read_text())
        if body.get("key") == key and body.get("passed"):
            return body
        failed = [c["name"] for c in body.get("checks", []) if not c.get("passed")]
        raise InputError(f"the verification certificate {path} did not pass ({', '.join(failed)}); "
                         f"fix the core, then run: {command}")
    others = []
    for other in sorted(certificate_dir().glob("*.json")) if certificate_dir().is_dir() else []:
        try:
            others.append(json.loads(other.read_text())["key"])
        except (ValueError, KeyError, OSError):
            continue
    raise InputError(f"no verification certificate for the {core} core on {key['device']} in "
                     f"{dtype}{_mismatch(key, others)}; run: {command}")


def _mismatch(key: dict[str, str], others: list[dict[str, str]]) -> str:
    """What differs from the closest certificate there is (most fields equal)."""
    if not others:
        return ""
    closest = max(others, key=lambda o: sum(o.get(k) == v for k, v in key.items()))
    differ = [k for k, v in key.items() if closest.get(k) != v]
    words = {"source_hash": "the core's sources changed since it was verified",
             "torch": f"torch {closest.get('torch')} was verified, this is {key['torch']}"}
    return " (" + "; ".join(words.get(k, f"{k}: {closest.get(k)} verified, {key[k]} here")
                            for k in differ) + ")"
