"""The `xbench` command line: the composition root, above common/, the backends and reports/.

One module per command (asv's layout); `xbench.cli.main` assembles them and is the entry point.
Nothing below this package imports it.
"""
