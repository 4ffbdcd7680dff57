"""The report's two pages of the same walked sections (reports.sections.section.walk):
index.html, one self-contained page (figures embedded as data: URLs, no script, no network), and
summary.md. The HTML page reads top down: the decision, the verdicts, then per section what it
states (its answers, never folded), how it was measured (folded: <details>, which needs no
script), its figures (side by side where they fit) and its tables (long ones folded).

Everything that comes from the results is escaped here (tables.markdown_text for Markdown), and
the HTML page's Content-Security-Policy allows no script at all, so a backend name or error text
with `<script>` in it stays text.
"""
import base64
import re
from html import escape

from xbench.reports.judging import decision
from xbench.reports.judging.verdict import Verdicts, finding_lines, headings, warning_text
from xbench.reports.rendering.tables import markdown, markdown_text
from xbench.reports.sections.section import ShownFigure, ShownSection, ShownTable

NUMBER = re.compile(r"^(×?[-−+]?[\d.,]+(e[-+]?\d+)?[×%]?|—|\[[-−\d.,e+ ]+\])$")
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px; padding: 0 1em;
       color: #222; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
.verdicts { background: #f6f8fa; padding: 0.5em 1em; } .verdicts li { margin: 0.2em 0; }
.answer { font-weight: 600; }
.warning { background: #fff4e5; border-left: 4px solid #f0a020; padding: 0.5em 1em; }
.figures { display: flex; flex-wrap: wrap; gap: 0 2em; align-items: flex-start; }
figure { margin: 1em 0; max-width: 100%; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
.table { overflow-x: auto; margin: 1em 0; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.number { text-align: right; white-space: nowrap; }
td { max-width: 50em; overflow-wrap: anywhere; }
.missing { color: #888; font-style: italic; }
details > summary { cursor: pointer; color: #555; }
details.table > summary h3 { display: inline; }
details.methods { font-size: 0.9em; } details[open].methods { background: #f6f8fa; padding: 0 1em; }
"""


def html_page(title, meta_lines, verdicts: Verdicts, warnings, sections: list[ShownSection],
              pngs: dict[str, bytes], decided: list[decision.Decision] = ()) -> str:
    """The whole page, the decision first. `verdicts`: reports.judging.comparisons'; `warnings`: the
    notices (reports.rendering.tables.notices); `pngs`: {figure name: PNG bytes} of the figures
    drawn; `decided`: reports.judging.decision's."""
    body = [f"<h1>{escape(title)}</h1>", *[f"<p>{escape(line)}</p>" for line in meta_lines]]
    body += [f'<p class="warning">{escape(w)}</p>' for w in warnings]
    body += ['<h2 id="decision">The decision</h2>', decision_html(decided)]
    body += ['<h2 id="verdicts">What the results say</h2>', verdicts_html(verdicts)]
    for section in sections:
        body += [f"<h2>{escape(section.title)}</h2>", answers_html(section.answers),
                 methods_html(section.paragraphs)]
        drawn = [figure_html(f, pngs[f.name]) for f in section.figures if f.name in pngs]
        if drawn:
            body.append('<div class="figures">' + "".join(drawn) + "</div>")
        body += [f'<p class="missing">{escape(f.title)}: not drawn: {escape(f.reason)}.</p>'
                 for f in section.figures if f.name not in pngs and f.reason]
        body += [shown_table_html(shown) for shown in section.tables]
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


def markdown_page(meta, notices, verdicts: Verdicts, sections: list[ShownSection],
                  linked: bool, decided: list[decision.Decision] = ()) -> str:
    """summary.md: the notices, the decision and the verdicts, then each section's text,
    figures (`linked`: as the PNG files beside it; a figure not drawn says why) and tables.
    Everything from the results is escaped (tables.markdown_text)."""
    text = markdown_text
    parts = ["# xbench report", *map(text, meta), *[f"> **{text(n)}**" for n in notices],
             "## The decision", decision_markdown(decided),
             "## What the results say", verdicts_markdown(verdicts)]
    for section in sections:
        parts += [f"## {text(section.title)}", *[f"**{text(a)}**" for a in section.answers],
                  *map(text, section.paragraphs)]
        for figure in section.figures:
            if figure.drawing is not None and linked:
                parts.append(f"![{figure.title}]({figure.name}.png)\n\n{text(figure.caption)}")
            elif figure.reason:
                parts.append(f"_{text(figure.title)}: not drawn: {text(figure.reason)}._")
        for shown in section.tables:
            parts += [f"### {text(shown.title)}",
                      markdown(shown.frame) if len(shown.frame)
                      else f"_(empty: {text(shown.empty)})_"]
    return "\n\n".join(parts) + "\n"


def decision_markdown(decided: list[decision.Decision]) -> str:
    """Per setup its title in bold, its ranking as a table, its sentence and what it left
    out."""
    text = markdown_text
    parts = [text(decision.EXPLAINED)]
    for d in decided:
        parts += [f"**{text(d.setup + ':')}**", markdown(decision.frame(d)) if d.choices else "",
                  f"**{text(decision.sentence(d))}**",
                  text(decision.left_out_text(d))]
    return "\n\n".join(p for p in parts if p) if decided else text(NO_RUN)


def decision_html(decided: list[decision.Decision]) -> str:
    """Per setup its title, its ranking as a table, its sentence in bold, what it left out."""
    if not decided:
        return f'<p class="missing">{escape(NO_RUN)}</p>'
    parts = [f"<p>{escape(decision.EXPLAINED)}</p>"]
    for d in decided:
        parts.append(f'<p class="family"><strong>{escape(d.setup + ":")}</strong></p>')
        if d.choices:
            parts.append(table_html(decision.frame(d)))
        parts.append(f'<p class="sentence"><strong>{escape(decision.sentence(d))}</strong></p>')
        if decision.left_out_text(d):
            parts.append(f'<p class="warning">{escape(decision.left_out_text(d))}</p>')
    return '<div class="decision">' + "".join(parts) + "</div>"


NO_RUN = "No decision: no run finished ok."


def verdicts_markdown(verdicts: Verdicts) -> str:
    """Each family's title in bold over its findings as a list; the control's line and the
    warnings in bold after them."""
    text = markdown_text
    parts = []
    for family in verdicts.families:
        parts.append(f"\n**{text(family.title + ':')}**")
        parts += [f"- {text(line)}" for verdict in family.verdicts
                  for line in finding_lines(verdict)]
    parts += [f"\n**{text(line)}**" for line in headings(verdicts)]
    parts += [f"\n**{text(warning_text(w))}**" for w in verdicts.warnings]
    return "\n".join(parts)


def verdicts_html(verdicts: Verdicts) -> str:
    """Family headings with their findings as lists; warnings stand out."""
    parts = []
    for family in verdicts.families:
        parts.append(f'<p class="family"><strong>{escape(family.title + ":")}</strong></p>')
        findings = [line for verdict in family.verdicts for line in finding_lines(verdict)]
        if findings:
            parts.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in findings)
                         + "</ul>")
    parts += [f'<p class="family"><strong>{escape(line)}</strong></p>'
              for line in headings(verdicts)]
    parts += [f'<p class="warning">{escape(warning_text(w))}</p>' for w in verdicts.warnings]
    return '<div class="verdicts">' + "".join(parts) + "</div>"


def answers_html(answers: list[str]) -> str:
    """What a section's numbers answer, above its fold: read without opening anything."""
    return "".join(f'<p class="answer">{escape(answer)}</p>' for answer in answers)


def methods_html(paragraphs: list[str]) -> str:
    """A section's explanation (how its numbers were measured), folded: one line until opened,
    so that the figures and tables follow the verdicts closely."""
    if not paragraphs:
        return ""
    return ('<details class="methods"><summary>How these were measured</summary>'
            + "".join(f"<p>{escape(p)}</p>" for p in paragraphs) + "</details>")


def shown_table_html(shown: ShownTable) -> str:
    """A table under its title; one of more than LONG_TABLE rows folded under its title and
    its count of rows; an empty one a line that says why."""
    if shown.frame.empty:
        return (f'<p class="missing"><strong>{escape(shown.title)}</strong>: empty: '
                f"{escape(shown.empty)}.</p>")
    title = f"<h3>{escape(shown.title)}</h3>"
    if len(shown.frame) <= LONG_TABLE:
        return title + table_html(shown.frame)
    return (f'<details class="table"><summary>{title} ({len(shown.frame)} rows)</summary>'
            + table_html(shown.frame) + "</details>")


LONG_TABLE = 8  # rows: a table longer than this is folded until opened


def figure_html(figure: ShownFigure, png: bytes) -> str:
    """The figure at its own width (its caption wrapped to it, so that narrow figures sit side
    by side), never wider than the page."""
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure id="{escape(figure.name)}" style="width: {png_width(png)}px">'
            f"<h3>{escape(figure.title)}</h3>"
            f'<img src="data:image/png;base64,{data}" alt="{escape(figure.title)}">'
            f"<figcaption>{escape(figure.caption)}</figcaption></figure>")


def png_width(png: bytes) -> int:
    """A PNG's width in pixels, from its header (IHDR, the first chunk)."""
    return int.from_bytes(png[16:20], "big")


def table_html(frame) -> str:
    head = "".join(f"<th>{escape(str(c))}</th>" for c in frame.columns)
    rows = "".join("<tr>" + "".join(cell_html(v) for v in row) + "</tr>"
                   for row in frame.itertuples(index=False))
    return (f'<div class="table"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>")


def cell_html(value):
    """A table cell: numbers (and intervals of them) right-aligned, anything else as text."""
    text = str(value)
    kind = ' class="number"' if NUMBER.match(text) else ""
    return f"<td{kind}>{escape(text)}</td>"
