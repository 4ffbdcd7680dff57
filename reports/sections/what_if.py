"""Predicted on other hardware (with --link): what the model predicts for each backend's 1-device
cells on more devices and nodes over the link given."""
from xbench.reports.rendering.predict_tables import what_if_table
from xbench.reports.sections.data import Options, ReportData
from xbench.reports.sections.section import Section, Table
from xbench.reports.step_model import predict, what_if

WHAT_IF_DEVICES, WHAT_IF_NODES = [1, 2, 4, 8], [1, 8, 64]
WHAT_IF_TEXT = (
    "What the same model predicts for each backend's 1-device cells on 1, 2, 4 and 8 devices per "
    "node and 1, 8 and 64 nodes over the link given (`xbench report --link`), each device's "
    "compute the measured device's own (the column compute names it; a link that joins only "
    "another device model is not predicted on: `xbench predict --device` says whose compute): "
    "predicted, never measured, and never mixed into the tables above (`xbench predict` for "
    "other counts).")


def scaled_out(data: ReportData):
    options = data.options
    return what_if_table(what_if.what_if(data.cells, data.calibrating, data.probes,
                                         WHAT_IF_DEVICES, WHAT_IF_NODES, options.link,
                                         options.between_nodes))


def links_named(data: ReportData) -> str:
    options = data.options
    return (f"Predicted, not measured: {options.link.name} between devices, "
            f"{options.between_nodes.name} between nodes")


def asked(options: Options) -> bool:
    return options.link is not None


SECTION = Section(
    name="what_if",
    title="Predicted on other hardware",
    paragraphs=[WHAT_IF_TEXT, lambda data: predict.band_text(data.check)],
    tables=(Table("what_if", links_named, scaled_out,
                  "no attributed 1-device cell of a backend that spans devices"),),
    shown=asked)
