"""The DDP trainer: neural correctors
trained end to end through a verified pompy core, on one process or many
(``python -m pompy.train``, ``pompy train``, under torchrun or not).

    data        the dataset, its split and loaders, the packed channels and
                their normaliser
    losses      the per-field loss weights, the CSV logs' columns, the field losses
    pool        the cores: built, pooled, started, stepped as an ensemble
    physics     the physics runner and the hybrid forward (run_hybrid)
    networks    CorrectorNet, the learned parameters, SyncBatchNorm on CPU
    correctors  the networks of a run and how corrections enter the state
    optim       Adam, the cosine schedule, clipping, skipped steps
    log         train_log.csv and epoch_log.csv
    checks      the run's folder (an earlier run, --resume alone)
    checkpoint  checkpoints on disk, --resume, RNG states, the certificate's id
    trainer     NPOMTrainerDDP (its docstring: what a run does)
    cli         the command and its exit status

The settings are pompy.settings.TrainSettings (the &train group and the
flags).

The names below are loaded on first use, so that ``python -m pompy.train``
chooses its allocator before torch loads (pompy.train.__main__).
"""
from __future__ import annotations

from pompy.utils.lazy import lazy_exports

_EXPORTS = {
    "InputError": "pompy.errors",
    "TrainSettings": "pompy.settings", "build_parser": "pompy.train.cli",
    "parse_settings": "pompy.train.cli",
    "check_output": "pompy.train.checks", "parse_learn": "pompy.settings.train",
    "parse_loss_weights": "pompy.settings.train",
    "TrainingData": "pompy.train.data", "Correctors": "pompy.train.correctors",
    "PhysicsRunner": "pompy.train.physics", "run_hybrid": "pompy.train.physics",
    "Optimisation": "pompy.train.optim", "TrainingLog": "pompy.train.log",
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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, lambda: globals())
