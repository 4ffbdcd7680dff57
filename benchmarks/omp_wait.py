"""Which OpenMP wait policy should PyTorch's CPU cells run with? Rounds alternate the policies
(the runtime's own, passive, spin counts of 10,000 and 1,000, active) on one PyTorch loop of the
small MNIST CNN (harness_spread's hand loop: 2 threads, Adam, batch 128, 8,192 images), on a
quiet machine and beside one busy loop of equal priority (a Python `while True`), in one run.
Printed: each run's epoch-2 rate, then per policy and condition the mean and range, and each
policy's ratio to the runtime's own (the xbench of before) in both conditions.

    python benchmarks/omp_wait.py --data-dir ../shared/data/mnist [--rounds 4]
"""
import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness_spread import CELL, HAND_LOOP  # noqa: E402

# What each policy sets in the environment (common.running.env.omp_environment does the same for
# a cell; the runtime's own: neither variable).
POLICIES = {"runtime": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
            "spin 10000": {"GOMP_SPINCOUNT": "10000"}, "spin 1000": {"GOMP_SPINCOUNT": "1000"},
            "active": {"OMP_WAIT_POLICY": "ACTIVE"}}
BUSY_LOOP = [sys.executable, "-c", "while True: pass"]


def rate(policy: dict, data_dir: str, threads: int) -> float:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    done = subprocess.run([sys.executable, "-c", HAND_LOOP, str(threads), data_dir,
                           str(CELL["max_train_samples"]), str(CELL["batches"][0])],
                          capture_output=True, text=True, check=True,
                          env={**environment, **policy})
    return float(done.stdout.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    data_dir = os.path.abspath(args.data_dir)
    rates = {(name, busy): [] for name in POLICIES for busy in (False, True)}
    for round_ in range(args.rounds):
        for busy in ((False, True) if round_ % 2 == 0 else (True, False)):
            loop = subprocess.Popen(BUSY_LOOP) if busy else None
            try:
                names = list(POLICIES) if round_ % 2 == 0 else list(POLICIES)[::-1]
                for name in names:
                    found = rate(POLICIES[name], data_dir, args.threads)
                    rates[(name, busy)].append(found)
                    print(f"round {round_ + 1} {'busy' if busy else 'quiet'} {name}: "
                          f"{found:,.0f} samples/s", flush=True)
            finally:
                if loop:
                    loop.kill()
                    loop.wait()
    for busy in (False, True):
        base = statistics.fmean(rates[("runtime", busy)])
        for name in POLICIES:
            values = rates[(name, busy)]
            print(f"{'beside a busy loop' if busy else 'quiet':>18} {name:>10}: mean "
                  f"{statistics.fmean(values):,.0f} samples/s ({min(values):,.0f} to "
                  f"{max(values):,.0f}), {statistics.fmean(values) / base:.2f}x the runtime's "
                  f"own")


if __name__ == "__main__":
    main()
