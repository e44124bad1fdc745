"""The trainer (the seed's "DDP Training Pipeline"): neural correctors
trained end to end through a verified pompy core, on one process or many
(``python -m pompy.train``, ``pompy train``, under torchrun or not).

    options     the options' table: the command line and the &train group
    checks      the options' checks (loss weights, --learn, the output folder)
    data        the dataset, batches, the packed channels and their normaliser
    losses      the seed's loss weights, the CSV log's columns, the field losses
    pool        the cores: built, pooled, injected, stepped as an ensemble
    networks    CorrectorNet, the learned parameters, SyncBatchNorm on CPU
    checkpoint  checkpoints on disk, --resume, RNG states, the certificate's id
    trainer     NPOMTrainerDDP (its docstring: what a run does)
    cli         the command and its exit status

The names below are loaded on first use, so that ``python -m pompy.train``
chooses its allocator before torch loads (pompy.train.__main__).
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "InputError": "pompy.errors",
    "OPTIONS": "pompy.train.options", "build_parser": "pompy.train.options",
    "load_model_config": "pompy.train.options", "read_train_group": "pompy.train.options",
    "resolve_options": "pompy.train.options",
    "check_output": "pompy.train.checks", "parse_learn": "pompy.train.checks",
    "parse_loss_weights": "pompy.train.checks",
    "Normalizer": "pompy.train.data", "apply_correction_to_pom": "pompy.train.data",
    "collate_samples": "pompy.train.data", "pack_pom_batch": "pompy.train.data",
    "CSV_COLUMNS": "pompy.train.losses", "LOSS_FIELDS": "pompy.train.losses",
    "LOSS_WEIGHTS": "pompy.train.losses",
    "CorePool": "pompy.train.pool", "inject_core_state": "pompy.train.pool",
    "CorrectorNet": "pompy.train.networks", "PhysicsParameters": "pompy.train.networks",
    "SyncBatchNormCPU": "pompy.train.networks",
    "convert_sync_batchnorm": "pompy.train.networks",
    "certificate_id": "pompy.train.checkpoint", "load_resume": "pompy.train.checkpoint",
    "NPOMTrainerDDP": "pompy.train.trainer",
    "main": "pompy.train.cli",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
