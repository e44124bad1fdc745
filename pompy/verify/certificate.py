"""The verification certificates (``pompy verify``) the trainer requires.

A certificate is a JSON file under ``$POMPY_HOME/certificates`` (default
``~/.cache/pompy``) holding every figure a verification measured and
whether every check passed, under its key: what was verified.

The key: the core, the device type, the dtype, the torch version, the
source hash of the physics (pompy.provenance.source_hash: an edited core
has no certificate until it is verified again) and of the verifier
itself (an edited verifier's figures are not yet measured) and of the
modules that build and step cores for training (pompy.provenance.
training_sources: an edit there changes the physics in the trainer's
loop), the grid (im x jm x kb, and the hash of the set-up's h, dx, dy and
fsm: another bathymetry on the same shape is another grid), the gradient
policies of the config's &gradient_policy group (the gradient checks run
under them), and for a core that solves for the elevation the settings
its figures depend on: theta, cg_tol, cg_maxiter and the solver gradients
go through. :func:`require_certificate` finds the passed certificate of
exactly what is about to train, holding every check the verifier defines
for that core (:func:`check_names`, from the suites' own tables), or says
what did not match and the ``pompy verify`` command to run.

What it guards against: training on a core that was never verified, was
edited since, or is configured otherwise (another grid, tolerance,
device, dtype, torch, bathymetry or gradient policy). What not: a file written by hand; the key is a
record, not a signature.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from pompy import cores, provenance
from pompy.config import Config
from pompy.errors import InputError
from pompy.oracle.build import pompy_home


def certificate_key(core: str, device: str | torch.device, dtype: str, config: Config
                    ) -> dict[str, Any]:
    """What a certificate is for (the module docstring)."""
    key = {"core": core, "device": torch.device(device).type, "dtype": dtype,
           "torch": torch.__version__, "source_hash": provenance.source_hash(),
           "verifier_hash": provenance.source_hash(provenance.verifier_sources()),
           "training_hash": provenance.source_hash(provenance.training_sources()),
           "grid": f"{config.im}x{config.jm}x{config.kb}",
           "grid_hash": provenance.config_grid_hash(config),
           "policies": config.policies.to_dict()}
    if cores.get(core).solver:
        from pompy.core.external import cg

        key.update(theta=config.theta, cg_tol=config.cg_tol, cg_maxiter=config.cg_maxiter,
                   solver=cg.GRADIENT_SOLVERS[config.preconditioner])
    return key


def check_names(core: str) -> list[str]:
    """Every check the verifier defines for ``core``, from its suites' tables."""
    from pompy.verify import gradcheck, parity, policies, run

    return [*parity.check_names(core), *run.check_names(core), *gradcheck.check_names(core),
            *policies.check_names()]


def certificate_dir() -> Path:
    return pompy_home() / "certificates"


def certificate_path(key: dict[str, Any]) -> Path:
    torch_version = key["torch"].replace("+", "_")
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return certificate_dir() / (f"{key['core']}-{key['device']}-{key['dtype']}-{key['grid']}"
                                f"-torch{torch_version}-{digest}.json")


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
    return f"pompy verify {config} --core {core} --device {device} --dtype {dtype}"


def require_certificate(core: str, device: str | torch.device, dtype: str, config: Config,
                        config_name: str = "CONFIG") -> dict[str, Any]:
    """The passed certificate of exactly this key (:func:`certificate_key`)
    holding every check of :func:`check_names`, each passed; otherwise
    InputError naming what did not match (against the closest certificate
    found) and the command to run."""
    key = certificate_key(core, device, dtype, config)
    command = verify_command(core, key["device"], dtype, config_name)
    path = certificate_path(key)
    if not path.is_file():
        raise InputError(f"no verification certificate for the {core} core on {key['device']} "
                         f"in {dtype} on the {key['grid']} grid{_mismatch(key, _others())}; "
                         f"run: {command}")
    try:
        body = json.loads(path.read_text())
        checks = {c["name"]: bool(c["passed"]) for c in body["checks"]}
    except (ValueError, KeyError, TypeError, OSError) as err:
        raise InputError(f"the verification certificate {path} is unreadable ({err}); "
                         f"run: {command}") from None
    if body.get("key") != key:
        raise InputError(f"the verification certificate {path} is not for this "
                         f"core{_mismatch(key, [body.get('key') or {}])}; run: {command}")
    failed = [name for name, passed in checks.items() if not passed]
    if failed or body.get("passed") is not True:
        raise InputError(f"the verification certificate {path} did not pass ({', '.join(failed)}); "
                         f"fix the core, then run: {command}")
    missing = [name for name in check_names(core) if name not in checks]
    if missing:
        raise InputError(f"the verification certificate {path} lacks {len(missing)} of the "
                         f"checks pompy verify defines for the {core} core ({', '.join(missing[:3])}"
                         f"{' ...' if len(missing) > 3 else ''}); run: {command}")
    return body


def _others() -> list[dict[str, Any]]:
    """The keys of every certificate there is."""
    keys = []
    for other in sorted(certificate_dir().glob("*.json")) if certificate_dir().is_dir() else []:
        try:
            keys.append(json.loads(other.read_text())["key"])
        except (ValueError, KeyError, TypeError, OSError):
            continue
    return keys


def _mismatch(key: dict[str, Any], others: list[dict[str, Any]]) -> str:
    """What differs from the closest certificate there is (most fields equal)."""
    if not others:
        return ""
    closest = max(others, key=lambda o: sum(o.get(k) == v for k, v in key.items()))
    differ = [k for k, v in key.items() if closest.get(k) != v]
    if "grid" in differ and "grid_hash" in differ:     # another shape: its fields differ too
        differ.remove("grid_hash")
    words = {"source_hash": "the core's sources changed since it was verified",
             "verifier_hash": "pompy verify changed since the certificate was made",
             "training_hash": "the trainer's core-building code (pompy/train/pool.py, "
                              "physics.py) changed since it was verified",
             "grid_hash": "the grid's h, dx, dy or fsm differ from those verified",
             "torch": f"torch {closest.get('torch')} was verified, this is {key['torch']}"}
    return " (" + "; ".join(words.get(k, f"{k}: {closest.get(k)} verified, {key[k]} here")
                            for k in differ) + ")"
