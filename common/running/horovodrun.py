"""`python -m xbench.common.running.horovodrun ARGS...`: Horovod's own horovodrun (its
`run_commandline`: the same arguments, hosts, ssh, rendezvous and environment for every rank)
without the check it makes before every launch that Horovod was built with Gloo.

That check imports each of Horovod's framework extensions in a new process, TensorFlow's first
whatever the cell trains with: about 3 s of CPU before every Horovod cell, a third of a small
cell (`horovodrun -np 2 -H localhost:2 --gloo python -c pass`: 3.4 s; this: 0.4 s, on this
project's 2-core machine). Each rank checks instead, after hvd.init(), that it talks through Gloo
(common.backends.horovod_support.init fails the cell with the reason where it does not), and
every row records the controller its ranks ran. It imports Horovod's launcher only, no framework.
"""
import sys

from horovod.runner import launch


def main() -> int:
    launch.gloo_built = lambda verbose=False: True
    return launch.run_commandline()


if __name__ == "__main__":  # horovodrun starts each local rank through multiprocessing's spawn
    sys.exit(main())
