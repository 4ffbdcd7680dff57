"""Framework-free core of xbench, in rooms by job. Each room's docstring says what it holds and
which rooms it may import (tests/test_layout.py checks it); rooms import only downwards:

    workload <- backends <- grids <- measuring <- results <- running

and every room may import the two modules here: errors (what a user can get wrong) and machine
(what this machine has). No module of common/ imports a framework, a backend or reports/.
"""
