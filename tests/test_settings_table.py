"""The settings table is the one place a setting is declared (common.grids.settings): its role
says what it is to the report, which derives from it every column it groups, pairs and labels
cells by. Nothing in reports/ lists setting names or restates their defaults by hand."""
import ast

import pytest

from tests.helpers import REPO
from xbench.common.grids.columns import columns, training_label
from xbench.common.grids.setting import Role
from xbench.common.grids.settings import IN_ROW, SETTINGS
from xbench.reports.numbers import analysis

DEFAULT_ROW = {s.row_name: s.row_value(s.cell_default) for s in IN_ROW}
SETTING_COLUMNS = {s.column_name for s in SETTINGS.values() if s.column_name}
PLACEMENT = set(columns(Role.PLACEMENT))


def other_value(setting):
    """A value of `setting` other than its default, as the row records it."""
    default = setting.cell_default
    if setting.choices:
        return next(c for c in setting.choices if c != default)
    if setting.kind is bool:
        return not default
    if setting.kind is float:
        return default / 2 if default else min(0.5, setting.maximum)
    if setting.kind is str:
        return setting.check_value("input-delay=10")  # the one free-text one: a fault
    return default + 1


def test_the_defaults_say_only_the_optimizer():
    assert training_label(DEFAULT_ROW) == "adam 0.001"


def test_the_training_label_says_each_choice_in_its_words():
    row = {**DEFAULT_ROW, "optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4,
           "lr_scaling": "linear", "warmup_epochs": 1, "precision": "bf16",
           "compression": "powersgd", "powersgd_rank": 2, "inject": "link=400mbit"}
    assert training_label(row) == ("precision bf16, sgd 0.1 m0.9 wd0.0005, lr linear/128, "
                                   "warm-up 1, compressed powersgd rank 2, "
                                   "inject link=400mbit")
    assert training_label(row, (Role.TRAINING,)).endswith("compressed powersgd rank 2")


@pytest.mark.parametrize("setting", [s for s in IN_ROW if s.role in (Role.TRAINING, Role.FAULT)],
                         ids=lambda s: s.key)
def test_every_training_choice_and_fault_changes_the_label(setting):
    """Cells that differ in any training choice or fault never share a training label, so the
    report never pairs them (a setting missing from the label would pair the wrong cells)."""
    bases = [dict(DEFAULT_ROW)]
    if isinstance(setting.label, str):  # said with the setting that carries it, at some value
        carrier = SETTINGS[setting.label]  # of it (lr_scaling's reference batch, PowerSGD's rank)
        bases = [{**DEFAULT_ROW, carrier.row_name: value}
                 for value in carrier.choices or [other_value(carrier)]]
    assert any(training_label({**base, setting.row_name: other_value(setting)})
               != training_label(base) for base in bases), setting.key


@pytest.mark.parametrize("setting", [s for s in SETTINGS.values() if s.column_name
                                     and s.role is not Role.BOOKKEEPING], ids=lambda s: s.key)
def test_the_report_compares_cells_only_alike_in_every_setting_but_the_placement(setting):
    """Speedups, baselines and families pair cells that agree on the setup columns (and the
    training label): every setting but the compared placement is among them, through its role."""
    if setting.role is Role.PLACEMENT:
        assert setting.column_name in analysis.PLACED
    elif setting.role is Role.SETUP:
        assert setting.column_name in analysis.SETUP
    else:
        assert setting.role in (Role.TRAINING, Role.FAULT) and "training" in analysis.SETUP


def report_sources():
    return sorted((REPO / "reports").rglob("*.py"))


def test_reports_list_no_setting_names_and_restate_no_defaults():
    """A list (or tuple, or set) in reports/ that names two or more settings' columns, one of them
    not the compared placement (backend, nodes, devices), is a hand-written copy of the table;
    so is `row.get('lr', 0.001)`, a default restated."""
    found = []
    for path in report_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                named = [e.value for e in node.elts
                         if isinstance(e, ast.Constant) and e.value in SETTING_COLUMNS]
                if len(named) >= 2 and set(named) - PLACEMENT:
                    found.append(f"{path.name}:{node.lineno} lists {named}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "get" and len(node.args) == 2
                  and isinstance(node.args[0], ast.Constant)
                  and node.args[0].value in SETTING_COLUMNS):
                found.append(f"{path.name}:{node.lineno} restates {node.args[0].value}'s default")
    assert not found, "\n".join(found)


def test_reports_parse_no_setting_out_of_a_label_or_a_key():
    """A row's fields are read as fields: no regular expression in reports/ reads a cell key or
    a training label."""
    for path in report_sources():
        text = path.read_text()
        for needle in ('"|e', "r\"\\|", "in str(training)", 're.sub(r", '):
            assert needle not in text, f"{path.name} parses {needle!r}"


def test_cells_fields_are_spelled_out_for_type_checkers():
    """Cell is made from the table; cell.pyi, which editors and type checkers read, is generated
    from the same table and must be current."""
    from xbench.common.grids import cell
    stub = REPO / "common" / "grids" / "cell.pyi"
    assert stub.read_text() == cell.stub(), ("cell.pyi is stale: run `python -m "
                                             "xbench.common.grids.cell > common/grids/cell.pyi`")
    for setting in IN_ROW:
        assert f"    {setting.field_name}: {setting.kind.__name__}\n" in stub.read_text()
