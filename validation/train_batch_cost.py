"""Time and peak memory per batch of the trainer, per rank: one epoch's
training and test batches, timed one by one (wall and this process's CPU
time), then the process's peak RSS. Takes pompy.train's settings:

    OMP_NUM_THREADS=1 torchrun --nproc_per_node=2 --master_addr=127.0.0.1 \\
        validation/train_batch_cost.py --config configs/train_tiny.nml \\
        --data data/train_tiny --output /tmp/train_cost

Prints one JSON line per rank (train and test seconds per batch, their
medians, peak_rss_mb). Needs the certificate the trainer needs.
"""
from __future__ import annotations

import json
import resource
import statistics
import sys
import time

from pompy import train


def main(argv=None) -> None:
    trainer = train.NPOMTrainerDDP(train.parse_settings(argv))
    try:
        out = {"rank": trainer.dist.rank, "world_size": trainer.dist.world_size}
        trainer.data.sampler.set_epoch(0)
        for phase, loader, run in (("train", trainer.data.train_loader, trainer.train_batch),
                                   ("test", trainer.data.test_loader or [], trainer.test_batch)):
            wall, cpu = [], []
            for ics, refs in loader:
                start, cpu0 = time.perf_counter(), time.process_time()
                run(ics, refs)
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - cpu0)
            out[phase] = {"batches": len(wall), "wall_s": wall, "cpu_s": cpu,
                          "median_wall_s": statistics.median(wall) if wall else None,
                          "median_cpu_s": statistics.median(cpu) if cpu else None}
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
        print(json.dumps(out), flush=True)
    finally:
        trainer.cleanup()


if __name__ == "__main__":
    main(sys.argv[1:])
