"""The trainer's checkpoints on disk: written atomically, tensors and
plain containers alone, read back for ``--resume`` with
``torch.load(weights_only=True)`` (a file carrying any other pickled object
is refused: unpickling it could run any code) and only when trained under
this core's certificate; every rank's RNG states; and the CSV log's rows a
resumed run keeps."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import random
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pompy.config import Config, state_differences
from pompy.errors import InputError
from pompy.files import check_room, fault


def certificate_id(body: Mapping) -> str:
    """A short id of a certificate: sha256 of its key's canonical JSON (what
    was verified: core, device type, dtype, torch, source hash), so that
    verifying the same core again keeps the id and an edited one changes it."""
    return hashlib.sha256(json.dumps(body["key"], sort_keys=True).encode()).hexdigest()[:16]


def serialized(body: Mapping) -> bytes:
    """``body`` as torch.save writes it (what save_atomically writes)."""
    buffer = io.BytesIO()
    torch.save(body, buffer)
    return buffer.getvalue()


def save_atomically(body: Mapping | bytes, targets: Iterable[Path],
                    doing: str = "writing a checkpoint") -> None:
    """``body`` (or its :func:`serialized` bytes) into each target: written
    beside it, on disk, then renamed over it, so that a crash leaves the old
    file or the new, whole. A target with too little room free, or one that
    cannot be written (a full disk, a read-only or unwritable folder), is an
    EnvironmentFault naming it and the cause (``doing``: what for), with the
    old file as it was and no ``.tmp`` left; the targets before it are
    written."""
    data = body if isinstance(body, bytes) else serialized(body)
    for target in targets:
        check_room(target, len(data), doing)
        tmp = target.with_name(target.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())       # on disk before it replaces the old one
            os.replace(tmp, target)
        except OSError as err:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise fault(target, err, doing) from None


def physics_record(config: Config) -> dict:
    """What a checkpoint records of the physics it was trained with: the
    config's namelist (its state parameters) and its gradient policies."""
    return {"namelist": str(config.to_namelist()), "policies": config.policies.to_dict()}


def physics_differences(body: Mapping, config: Config) -> list[str]:
    """How ``config`` differs from the physics a checkpoint was trained
    with (its state parameters, as a restart is checked, and its gradient
    policies); [] for a checkpoint that predates the record."""
    saved = body.get("physics")
    if not saved:
        return []
    changed = state_differences(config, saved["namelist"], "checkpoint")
    if saved.get("policies") != config.policies.to_dict():
        changed.append(f"&gradient_policy: {saved.get('policies')} (checkpoint) -> "
                       f"{config.policies.to_dict()}")
    return changed


def load_resume(path: Path, certificate: Mapping, config: Config) -> dict:
    """The checkpoint ``--resume`` names, trained under ``certificate``'s
    core and ``config``'s physics; else InputError (unreadable, carrying a
    pickled object other than tensors and plain containers, trained under
    another certificate or other physics: its networks learned another
    core's physics)."""
    try:
        body = torch.load(path, map_location="cpu", weights_only=True)
        saved = body["certificate"]
    except pickle.UnpicklingError as err:
        raise _refused(path, err) from err
    except (OSError, RuntimeError, EOFError, KeyError, TypeError, ValueError) as err:
        raise InputError(f"--resume {path}: not a pompy.train checkpoint ({err})") from err
    mine = certificate_id(certificate)
    if saved.get("id") != mine:
        key, old = certificate["key"], saved.get("key") or {}
        differ = ", ".join(f"{k} {old.get(k)} -> {v}" for k, v in key.items() if old.get(k) != v)
        raise InputError(f"--resume {path}: trained under certificate {saved.get('id')}, this core "
                         f"has certificate {mine} ({differ or 'another key'}); resume with the "
                         f"core it was trained on, or start a new run without --resume")
    changed = physics_differences(body, config)
    if changed:
        raise InputError(f"--resume {path} was trained with other physics than the config's: "
                         f"{'; '.join(changed)}; resume with the config it was trained with "
                         "(its namelist is in the checkpoint's options), or start a new run")
    return body


def _refused(path: Path, err: pickle.UnpicklingError) -> InputError:
    """One line for what torch.load(weights_only=True) refused (its own
    message runs to several): the pickled global it names, else the
    reason."""
    text = str(err)
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if found:
        return InputError(f"--resume {path}: refused: it carries a pickled {found.group(1)}, "
                          "and a pompy.train checkpoint holds tensors and plain containers "
                          "alone (unpickling other objects could run any code)")
    lines = [line.strip() for line in text.splitlines() if line.strip()
             and not line.startswith(("Weights only load failed", "Check the documentation"))]
    reason = lines[-1].split("error:")[-1].strip() if lines else ""
    return InputError(f"--resume {path}: not a pompy.train checkpoint "
                      f"({reason or type(err).__name__})")


def load_networks(saved: Mapping, nets: Mapping[str, nn.Module | None], path: Path) -> None:
    """Each network's saved weights into it (plain modules); a network the
    checkpoint has and the options lack, or the reverse, is an InputError."""
    for name, net in nets.items():
        weights = saved.get(name)
        if (net is None) != (weights is None):
            raise InputError(f"--resume {path}: the checkpoint "
                             f"{'has' if weights is not None else 'lacks'} a {name}; "
                             "resume with the options it was trained with")
        if net is not None:
            net.load_state_dict(weights)


def rng_state(device: torch.device) -> dict:
    """This process's RNG states (torch, numpy, Python; CUDA on a GPU) as
    tensors and plain containers (weights_only loads them)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, python_gauss = random.getstate()
    state = {"torch": torch.get_rng_state(),
             "numpy": {"name": str(name), "keys": keys.tolist(), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(gauss)},
             "python": {"version": int(version), "internal": list(internal),
                        "gauss": python_gauss}}
    if torch.cuda.is_available() and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: Mapping, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    n, p = state["numpy"], state["python"]
    np.random.set_state((n["name"], np.array(n["keys"], dtype=np.uint32), n["pos"],
                         n["has_gauss"], n["cached_gaussian"]))
    random.setstate((p["version"], tuple(p["internal"]), p["gauss"]))
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def kept_log_rows(log_path: Path, start_epoch: int) -> list[str]:
    """The log's rows up to the resumed checkpoint's epoch: the rows of
    an interrupted later epoch go, as the run does that epoch again."""
    if not log_path.exists():
        return []
    lines = log_path.read_text().splitlines(keepends=True)[1:]
    epoch = [line.split(",", 1)[0] for line in lines]
    kept = [line for line, e in zip(lines, epoch)           # a cut last line goes too
            if line.endswith("\n") and e.isdigit() and int(e) < start_epoch]
    if len(kept) < len(lines):
        print(f"pompy train: {len(lines) - len(kept)} rows of epochs from {start_epoch} on "
              f"dropped from {log_path} (done again)", file=sys.stderr)
    return kept
