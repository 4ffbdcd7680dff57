"""Settings, grids and cells: every setting declared once, the report's columns of them, grid
files turned into validated cells, a cell and its key, and the plain-text table a grid prints.

May import: workload, backends.
"""
