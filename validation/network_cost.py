"""The networks' share of a training sample: the CorrectorNets of a
training config (its channels 4(kb-1)+5, hidden_channels, norm, the
physics' dtype, the encoder and the decoder as its &train group sets
them), forward and backward on one sample of its grid, one thread.

    OMP_NUM_THREADS=1 python3 validation/network_cost.py \
        --configs configs/train_tiny.nml,configs/train_seamount.nml,configs/train_360x240.nml

A sample runs each network once a correction cycle, ``horizon`` cycles;
the physics' own share is validation/train_step_cost.py's (docs/performance).
Reported per config: seconds a network pass forward and backward (the least
of ``--repeat`` timings after one warm-up), the networks' seconds a sample
(passes x horizon), and the load average before the config's timings.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from pompy.config import load_config
from pompy.settings.base import read
from pompy.settings.train import TrainSettings
from pompy.train.correctors import channels
from pompy.train.networks import CorrectorNet


def settings(config: str) -> TrainSettings:
    return read(TrainSettings, {"config": config, "data": "-", "output": "-"}, config=Path(config))


def one_pass(net: torch.nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """(forward, backward) seconds of one pass on ``x``."""
    start = time.perf_counter()
    out = net(x)
    middle = time.perf_counter()
    out.square().sum().backward()
    return middle - start, time.perf_counter() - middle


def measure(path: str, repeat: int) -> dict:
    config, s = load_config(path), settings(path)
    dtype = getattr(torch, s.physics.dtype)
    net = CorrectorNet(channels(config.kb), s.model.hidden_channels,
                       torch.ones(config.jm, config.im), norm=s.model.norm).to(dtype)
    x = torch.randn(1, channels(config.kb), config.jm, config.im, dtype=dtype)
    load = os.getloadavg()[0]
    one_pass(net, x)                                   # warm-up: the first pass allocates
    forward, backward = min(one_pass(net, x) for _ in range(repeat))
    nets = int(s.model.encoder) + int(s.model.decoder)
    return {"config": path, "grid": f"{config.im}x{config.jm}x{config.kb}",
            "channels": channels(config.kb), "hidden": s.model.hidden_channels,
            "dtype": s.physics.dtype, "forward_s": round(forward, 4),
            "backward_s": round(backward, 4), "networks": nets, "horizon": s.data.horizon,
            "sample_s": round(nets * s.data.horizon * (forward + backward), 3),
            "load": round(load, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="configs/train_tiny.nml,configs/train_360x240.nml")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [measure(path, args.repeat) for path in args.configs.split(",")]
    print("| config | grid | channels, hidden | forward (s) | backward (s) | networks x horizon "
          "| a sample (s) | load |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {Path(r['config']).name} | {r['grid']} | {r['channels']}, {r['hidden']} | "
              f"{r['forward_s']} | {r['backward_s']} | {r['networks']} x {r['horizon']} | "
              f"{r['sample_s']} | {r['load']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
