"""Command-line options generated from common.grids.settings' table: each setting's flag, type, help
and list form are declared there once."""
from collections.abc import Callable, Iterable

import click

from xbench.cli.console import float_list, int_list, str_list
from xbench.common.grids.settings import Setting


def setting_options(settings: Iterable[Setting]) -> Callable:
    """A decorator adding one option per setting that has a flag, named by the setting's key
    (so the command receives them as the grid file's keys, None where not given)."""
    chosen = [s for s in settings if s.flag_name]

    def decorate(command):
        for setting in reversed(chosen):
            command = option(setting)(command)
        return command
    return decorate


def option(setting: Setting) -> Callable:
    """The click option of one setting: --x/--no-x for a truth value, a comma-separated list
    for an axis, a choice or a typed value otherwise."""
    flag, help_text = setting.flag_name, setting.help
    if setting.kind is bool:
        name = flag.removeprefix("--")
        return click.option(f"--{name}/--no-{name}", setting.key, default=None, help=help_text)
    if setting.axis:
        parse = {int: int_list, float: float_list}.get(setting.kind, str_list)
        return click.option(flag, setting.key, callback=parse, metavar="A,B,...",
                            help=help_text)
    if setting.choices:
        return click.option(flag, setting.key, type=click.Choice(setting.choices), help=help_text)
    return click.option(flag, setting.key, type=setting.kind, help=help_text)
