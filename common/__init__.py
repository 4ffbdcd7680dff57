"""Framework-free core of xbench, in rooms by job. Each room's docstring says what it holds and
which rooms it may import (tests/test_layout.py checks it); rooms import only downwards:

    workload <- backends <- grids <- measuring <- results <- running

and every room may import the modules here, below every room: errors (what a user can get
wrong), machine (what this machine has), json_shapes (JSON values checked against a shape), cache
(what xbench keeps of what it found), children (the processes it starts) and terminal (text for a
terminal). No module of common/ imports a framework, a backend or reports/.
"""
