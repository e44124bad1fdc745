"""The trainer's checkpoints on disk: written atomically, read back for
``--resume`` only when trained under this core's certificate, every
rank's RNG states, and the CSV log's rows a resumed run keeps."""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pompy.errors import InputError


def certificate_id(body: Mapping) -> str:
    """A short id of a certificate: sha256 of its key's canonical JSON (what
    was verified: core, device type, dtype, torch, source hash), so that
    verifying the same core again keeps the id and an edited one changes it."""
    return hashlib.sha256(json.dumps(body["key"], sort_keys=True).encode()).hexdigest()[:16]


def save_atomically(body: Mapping, targets: Iterable[Path]) -> None:
    """``body`` into each target: written beside it, on disk, then renamed
    over it, so that a crash leaves the old file or the new, whole."""
    for target in targets:
        tmp = target.with_name(target.name + ".tmp")
        with open(tmp, "wb") as f:
            torch.save(body, f)
            f.flush()
            os.fsync(f.fileno())       # on disk before it replaces the old one
        os.replace(tmp, target)


def load_resume(path: Path, certificate: Mapping) -> dict:
    """The checkpoint ``--resume`` names, trained under ``certificate``'s
    core; else InputError (unreadable, or trained under another certificate:
    its networks learned another core's physics)."""
    try:
        body = torch.load(path, map_location="cpu", weights_only=False)
        saved = body["certificate"]
    except (OSError, RuntimeError, EOFError, KeyError, TypeError, ValueError,
            pickle.UnpicklingError) as err:
        raise InputError(f"--resume {path}: not a pompy.train checkpoint ({err})") from err
    mine = certificate_id(certificate)
    if saved.get("id") != mine:
        key, old = certificate["key"], saved.get("key") or {}
        differ = ", ".join(f"{k} {old.get(k)} -> {v}" for k, v in key.items() if old.get(k) != v)
        raise InputError(f"--resume {path}: trained under certificate {saved.get('id')}, this core "
                         f"has certificate {mine} ({differ or 'another key'}); resume with the "
                         f"core it was trained on, or start a new run without --resume")
    return body


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
    """This process's RNG states (torch, numpy, Python; CUDA on a GPU)."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
             "python": random.getstate()}
    if torch.cuda.is_available() and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: Mapping, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
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
