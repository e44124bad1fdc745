"""validation/gpu_check.py's unit of (c), a training batch, run in a
process of its own (``gpu_check.py --unit train --spec JSON``): ``pompy
generate`` for the data, then NPOMTrainerDDP built through its seams, as
each rank of a torchrun launch of several builds it:

    gate   :class:`CheckedGate`: the trainer's gate (pompy.verify.
           certificate.require_certificate), and where it refuses, a
           stand-in certificate (``--train-gate stand-in``), the refusal
           recorded ("certified": false)
    dist   :class:`OneRankGroup`: rank 0 of a process group of one (NCCL
           on CUDA, gloo on the CPU, a TCP rendezvous on a free port),
           which the trainer joins after its gate and whose networks it
           then DDP-wraps; a group that cannot be made leaves a plain
           process, measured as such (the reason reported)

then ``--train-batches`` calls of the trainer's train_batch, each timed
with its peak memory.
"""
from __future__ import annotations

import dataclasses
import resource
import socket
import time

import torch
import torch.distributed as dist

from gpu_units import device_name, emit, error_text
from pompy.distributed import Distributed


def read_train_settings(config: str, data: str, output: str, device: str):
    """The pompy.settings.TrainSettings of (c)'s run of ``config``: its
    &train group, the data and output folders, ``device``, every member
    for training (test_fraction 0), no progress bar, the folder overwritten."""
    from pompy import settings

    return settings.read(settings.TrainSettings, {
        "config": config, "data": data, "output": output, "device": device,
        "test_fraction": 0.0, "progress": False, "overwrite": True})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CheckedGate:
    """The trainer's gate: the passed certificate of the set-up
    (require_certificate); without one, unless ``strict``, a stand-in
    certificate of the set-up's key (passed: false). ``certified`` and
    ``refusal`` say which it answered (None before it is asked)."""

    STAND_IN = "gpu_check: no certificate for this set-up"

    def __init__(self, strict: bool):
        self.strict = strict
        self.certified: bool | None = None
        self.refusal: str | None = None

    def __call__(self, core, device, dtype, config, config_name="CONFIG") -> dict:
        from pompy.errors import InputError
        from pompy.verify import certificate

        try:
            found = certificate.require_certificate(core, device, dtype, config,
                                                    config_name=config_name)
        except InputError as err:
            self.certified, self.refusal = False, str(err)
            if self.strict:
                raise
            return {"key": certificate.certificate_key(core, device, dtype, config),
                    "passed": False, "stand_in": self.STAND_IN}
        self.certified = True
        return found


@dataclasses.dataclass
class OneRankGroup(Distributed):
    """Rank 0 of a process group of one, acting as a rank of a launch of
    several: ``join`` makes the group (``backend``; ``error``: why it
    could not be made, the process then a plain one) and, once joined,
    the trainer DDP-wraps its networks. A plain Distributed of world size
    1 does neither (its ``many``, world_size > 1, decides both), so here
    ``many`` is whether the group was joined."""
    backend: str = "gloo"
    error: str | None = None

    @classmethod
    def on(cls, device: str) -> OneRankGroup:
        where = torch.device(device)
        return cls(device=where, backend="nccl" if where.type == "cuda" else "gloo")

    @property
    def many(self) -> bool:
        return self.joined

    def join(self) -> None:
        if self.joined:
            return
        try:
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device.index if self.device.index is not None
                                      else torch.cuda.current_device())
            dist.init_process_group(self.backend, rank=0, world_size=1,
                                    init_method=f"tcp://127.0.0.1:{free_port()}")
            self.joined = True
        except Exception as exc:        # measured as a plain process (torchrun's 1) then
            self.error = error_text(exc)


def generate_data(command: list[str]) -> bool:
    """``pompy generate ...`` in this process, reported; whether it made the data."""
    from pompy import cli

    start = time.perf_counter()
    code = cli.main(command)
    emit(kind="generate", seconds=time.perf_counter() - start, exit_code=code)
    if code != 0:
        emit(kind="train", status="failed", reason=f"pompy generate: exit {code} (its "
             "message above, on stderr)")
    return code == 0


def unit_train(spec: dict) -> None:
    """(c): the data generated, then the trainer on one process in a group
    of world size 1, its first batches timed."""
    from pompy.errors import InputError
    from pompy.train.trainer import NPOMTrainerDDP

    device = spec["device"]
    emit(kind="device", name=device_name(device))
    if not generate_data(spec["generate"]):
        return
    settings = read_train_settings(spec["config"], spec["data"], spec["output"], device)
    gate, group = CheckedGate(strict=spec["gate"] == "strict"), OneRankGroup.on(device)
    started = time.perf_counter()
    try:
        trainer = NPOMTrainerDDP(settings, dist=group, gate=gate)
    except InputError:
        if gate.certified is not False:     # not the gate's refusal
            raise
        emit(kind="train", status="not run", certified=False, reason=gate.refusal)
        return
    try:
        info = dict(trainer_info(trainer), certified=gate.certified, refusal=gate.refusal,
                    backend=group.backend, group_error=group.error,
                    build_s=time.perf_counter() - started)
        batches = timed_batches(trainer, spec["batches"], device.startswith("cuda"))
        emit(kind="train", status="ok" if batches else "failed",
             reason=None if batches else "no training batch in the data", batches=batches,
             **info)
    finally:
        trainer.cleanup()


def trainer_info(trainer) -> dict:
    """What the trainer runs: its group, whether its networks are DDP's,
    its grid and settings."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    s, config = trainer.settings, trainer.config
    nets = [trainer.correctors.wrapped[n] for n in ("encoder", "decoder")
            if trainer.correctors.wrapped[n] is not None]
    return dict(world_size=dist.get_world_size() if dist.is_initialized() else None,
                ddp=bool(nets) and all(isinstance(n, DDP) for n in nets),
                grid=f"{config.im}x{config.jm}x{config.kb}", core=s.physics.core,
                dtype=s.physics.dtype, batch_size=s.data.batch_size, horizon=s.data.horizon,
                steps_per_correction=s.data.steps_per_correction,
                hidden_channels=s.model.hidden_channels, train_samples=len(trainer.data.train))


def timed_batches(trainer, count: int, cuda: bool) -> list[dict]:
    """The first ``count`` training batches of epoch 0 through the
    trainer's train_batch, each reported as it ends: its seconds, loss and
    peak memory (CUDA's allocator; on the CPU the process's peak RSS)."""
    trainer.data.sampler.set_epoch(0)
    batches = []
    for n, (ics, refs) in enumerate(trainer.data.train_loader):
        if n >= count:
            break
        if cuda:
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        losses = trainer.train_batch(ics, refs)
        if cuda:
            torch.cuda.synchronize()
        batch = dict(seconds=time.perf_counter() - start, loss=losses[0])
        if cuda:
            batch.update(peak_gb=torch.cuda.max_memory_allocated() / 1e9,
                         reserved_gb=torch.cuda.max_memory_reserved() / 1e9,
                         before_gb=before / 1e9)
        else:
            batch.update(peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)
        batches.append(batch)
        emit(kind="progress", batch=n, **batch)
    return batches
