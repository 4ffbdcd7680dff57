"""Running cells: the runner, the launchers (local, Slurm) and their process trees and capped
links, the spawner, the worker every rank starts as, the training loop's shape and its hooks,
live progress, the environment a row records, the dry run, and the probe and profile commands.

May import: every other room of common/.
"""
