"""Text for a terminal: its width, lines wrapped at word boundaries, and tables sized to their
content within that width (the grid's closing table; predict's, compare's and profile's tables).

No word is ever cut: a column is at least its longest word wide. rich's Table is not used for
this: where its columns do not fit it shrinks the widest, cutting their words with an ellipsis
while a narrower column could still wrap. Where the columns cannot all be their longest word
wide, a table leaves out the columns its caller called optional, and then shows each row as a
block of "heading: value" lines."""
import re
import shutil
import textwrap
import unicodedata

GAP = "  "  # between columns
NARROWEST = 20  # columns of a terminal narrower than anything worth laying out
RULE = "-"
# a value that reads as a number (right-aligned): 1,234.5, -3%, 1.02×, or nothing measured
NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+(%|×|x)?$")
NOTHING = {"-", "—", ""}


# What must never reach a terminal as it is: control characters (C0, DEL, C1: the bell, escape
# sequences that move the cursor or recolour the screen) and invisible format characters (the
# bidirectional overrides and isolates that reorder what follows, zero-width ones), and the
# Unicode line and paragraph separators.
HIDDEN = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def printable(text: str) -> str:
    """`text` as a terminal may show it: each hidden character (HIDDEN; line breaks aside) as
    its escape, visible (\\x07, \\x1b, \\u202e), so that a file's text cannot ring the bell,
    move the cursor, recolour the screen or reorder what follows it."""
    if text.isprintable():
        return text
    return "".join(ch if ch == "\n" or unicodedata.category(ch) not in HIDDEN
                   else ascii(ch)[1:-1] for ch in text)


def width() -> int:
    """The terminal's columns: COLUMNS where it is set, else the terminal's, else 80 (output that
    is not a terminal)."""
    return max(shutil.get_terminal_size().columns, NARROWEST)


def wrap_words(text: str, columns: int, indent: str = "") -> list[str]:
    """`text` in lines of at most `columns` characters, broken only between words (a word longer
    than a line stays whole, on a line of its own); continuation lines start with `indent`."""
    return textwrap.wrap(text, columns, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [""]


def wrap(text: str, columns: int | None = None) -> str:
    """Each line of `text` within `columns` (the terminal's by default), broken between words; a
    wrapped line goes on two characters further in than it starts."""
    columns = columns or width()
    lines = []
    for line in text.splitlines():
        if len(line) <= columns:
            lines.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        lines += wrap_words(line, columns, indent + "  ")
    return "\n".join(lines)


def table(headings: list[str], rows: list[list[str]], columns: int | None = None,
          optional: tuple[str, ...] = ()) -> str:
    """An aligned table of text within `columns` (the terminal's by default): each column as
    wide as its widest value where they all fit, else wrapped between words; numbers
    right-aligned. The `optional` headings are left out, in their order, where that keeps every
    row on one line (and said so); where no column can be wrapped to fit, each row is a block of
    "heading: value" lines."""
    columns = columns or width()
    rows = [[str(value) for value in row] for row in rows]
    first = chosen = None  # (headings, rows, widths, left out): the first that fits, and the
    shown, values, left_out = headings, rows, []  # first with every row on one line
    for dropped in (None, *optional):
        if dropped in shown:
            keep = [i for i, heading in enumerate(shown) if heading != dropped]
            shown, values = [shown[i] for i in keep], [[row[i] for i in keep] for row in values]
            left_out = [*left_out, dropped]
        widths = fitted(shown, values, columns)
        if widths:
            first = first or (shown, values, widths, left_out)
            if all(w >= len(row[i]) for row in values for i, w in enumerate(widths)):
                chosen = (shown, values, widths, left_out)
                break
    if not (chosen or first):
        return "\n\n".join("\n".join(line for heading, value in zip(headings, row)
                                     for line in wrap_words(f"{heading}: {value}", columns,
                                                            "    "))
                           for row in rows) if rows else "(none)"
    shown, values, widths, left_out = chosen or first
    note = ([] if not left_out else
            wrap_words(f"(left out to fit {columns} columns: {', '.join(left_out)})", columns))
    return "\n".join(aligned(shown, values, widths) + note)


def fitted(headings: list[str], rows: list[list[str]], columns: int) -> list[int] | None:
    """Each column's width within `columns`: its widest value where all fit; else at least its
    longest word, widened first so that values, then headings, stay on one line (the room left
    given first to the columns that need least, so that as many as can are whole). None where
    the longest words alone do not fit."""
    cells = [[heading, *(row[i] for row in rows)] for i, heading in enumerate(headings)]
    least = [max(len(word) for value in column for word in value.split() or [""])
             for column in cells]
    values = [max([len(value) for value in column[1:]] + [least]) for column, least
              in zip(cells, least)]
    widest = [max(len(value) for value in column) for column in cells]
    room = columns - len(GAP) * (len(headings) - 1)
    if sum(least) > room:
        return None
    widths = least
    for goal in (values, widest):
        widths = widened(widths, goal, room)
    return widths


def widened(widths: list[int], goal: list[int], room: int) -> list[int]:
    """`widths` widened towards `goal` within `room`: the columns that need least first, the
    room left shared evenly by the others."""
    widths, spare = list(widths), room - sum(widths)
    wanting = sorted(range(len(widths)), key=lambda i: goal[i] - widths[i])
    for place, i in enumerate(wanting):
        given = max(0, min(goal[i] - widths[i], spare // (len(wanting) - place)))
        widths[i] += given
        spare -= given
    return widths


def aligned(headings: list[str], rows: list[list[str]], widths: list[int]) -> list[str]:
    """The header, a rule under it, and the rows, each value wrapped to its column's width."""
    right = [all(row[i] in NOTHING or NUMBER.match(row[i]) for row in rows)
             and any(NUMBER.match(row[i]) for row in rows) for i in range(len(headings))]
    lines = []
    for row in [headings, [RULE * w for w in widths], *rows]:
        wrapped = [wrap_words(value, w) for value, w in zip(row, widths)]
        for number in range(max(len(values) for values in wrapped)):
            parts = [values[number] if number < len(values) else "" for values in wrapped]
            lines.append(GAP.join(part.rjust(w) if is_right else part.ljust(w)
                                  for part, w, is_right in zip(parts, widths, right)).rstrip())
    return lines
