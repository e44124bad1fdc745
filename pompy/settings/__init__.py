"""The settings of pompy's commands as frozen, typed, nested dataclasses:
declared once (a default, a help text, a check), read once (defaults, the
config's namelist group, the flags: :func:`read`), the command lines made
from the same declarations (:func:`add_arguments`), and shown as a run
will use them (``--print-config``: :func:`describe`).

    base        how a setting is declared, read, checked and shown
    train       TrainSettings (&train): data, model, optimizer, physics,
                checkpoint, log
    generate    GenerateSettings (&generate): schedule, reference,
                ensemble, files
    run         RunSettings: model, length, files, checks
    commands    EvaluateSettings, VerifySettings
"""
from pompy.settings.base import (add_arguments, describe, flat, from_parsed,
                                 from_values, leaves, read, setting)
from pompy.settings.commands import EvaluateSettings, VerifySettings
from pompy.settings.generate import GenerateSettings
from pompy.settings.run import RunSettings
from pompy.settings.train import TrainSettings

__all__ = ["EvaluateSettings", "GenerateSettings", "RunSettings", "TrainSettings",
           "VerifySettings",
           "add_arguments", "describe", "flat", "from_parsed", "from_values", "leaves", "read",
           "setting"]
