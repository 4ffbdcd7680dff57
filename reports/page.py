"""index.html: one self-contained page (figures embedded as data: URLs, no script, no network).

Everything that comes from the results is escaped here, and the page's Content-Security-Policy
allows no script at all, so a backend name or error text with `<script>` in it stays text.
"""
import base64
import re
from html import escape

NUMBER = re.compile(r"^(×?[-−+]?[\d.,]+(e[-+]?\d+)?[×%]?|—|\[[-−\d.,e+ ]+\])$")
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px; padding: 0 1em;
       color: #222; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
.verdicts { background: #f6f8fa; padding: 0.5em 1em; } .verdicts li { margin: 0.2em 0; }
.warning { background: #fff4e5; border-left: 4px solid #f0a020; padding: 0.5em 1em; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
.table { overflow-x: auto; margin: 1em 0; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.number { text-align: right; white-space: nowrap; }
td { max-width: 50em; overflow-wrap: anywhere; }
.missing { color: #888; font-style: italic; }
"""


def html(title, meta_lines, verdict_lines, warnings, sections, figures, missing, tables):
    """The whole page. `verdict_lines`: reports.verdicts (a heading line per family, its findings
    indented); `sections`: [(heading, paragraphs, figure names, table names)];
    `figures`: {name: (title, caption, png bytes)}; `missing`: {name: (title, why not drawn)};
    `tables`: {name: (title, DataFrame of text, why it would be empty)}."""
    body = [f"<h1>{escape(title)}</h1>", *[f"<p>{escape(line)}</p>" for line in meta_lines]]
    body += [f'<p class="warning">{escape(w)}</p>' for w in warnings]
    body += ['<h2 id="verdicts">What the results say</h2>', verdicts_html(verdict_lines)]
    for heading, paragraphs, figure_names, table_names in sections:
        body.append(f"<h2>{escape(heading)}</h2>")
        body += [f"<p>{escape(p)}</p>" for p in paragraphs]
        for name in figure_names:
            if name in figures:
                body.append(figure_html(name, figures[name]))
            elif name in missing:
                body.append(f'<p class="missing">{escape(missing[name][0])}: not drawn: '
                            f'{escape(missing[name][1])}.</p>')
        for name in table_names:
            table_title, frame, empty = tables[name]
            body.append(f"<h3>{escape(table_title)}</h3>")
            body.append(table_html(frame, empty))
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


def verdicts_html(lines):
    """Family headings with their findings as lists; warnings stand out."""
    parts, open_list = [], False
    for line in lines:
        finding = line.startswith("  ")
        if finding and not open_list:
            parts.append("<ul>")
        if not finding and open_list:
            parts.append("</ul>")
        open_list = finding
        if finding:
            parts.append(f"<li>{escape(line.strip())}</li>")
        elif line.startswith("WARNING"):
            parts.append(f'<p class="warning">{escape(line)}</p>')
        else:
            parts.append(f'<p class="family"><strong>{escape(line)}</strong></p>')
    return '<div class="verdicts">' + "".join(parts) + ("</ul>" if open_list else "") + "</div>"


def figure_html(name, figure):
    title, caption, png = figure
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure id="{escape(name)}"><h3>{escape(title)}</h3>'
            f'<img src="data:image/png;base64,{data}" alt="{escape(title)}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def table_html(frame, empty):
    if frame.empty:
        return f'<p class="missing">Empty: {escape(empty)}.</p>'
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
