"""README.md and docs/ say only what is so: every relative link resolves, every `xbench` command
and option they show exists, and the settings table is the one in common/grids/settings.py."""
import re
import shlex

import click
import pytest

from tests.helpers import REPO
from xbench.cli.main import main
from xbench.common.grids.columns import reference_table

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
SPAN = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"^\s*(?:\S*/)?xbench( .*|$)")  # a line or span that runs xbench


def commands(text: str) -> list[str]:
    """Every `xbench ...` command line in the code of a Markdown page (fenced blocks, lines
    continued with a backslash joined, and inline code spans)."""
    code = [line for block in FENCE.findall(text)
            for line in block.replace("\\\n", " ").splitlines()]
    code += SPAN.findall(FENCE.sub("", text))
    found = []
    for line in code:
        for part in re.split(r";|&&", line.split("  #")[0]):
            match = COMMAND.match(part)
            if match:
                found.append(("xbench" + match[1]).strip())
    return found


def options_of(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        assert (page.parent / target.split("#")[0]).exists(), f"{page.name}: {target}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_and_option_shown_exists(page):
    shown = commands(page.read_text())
    for line in shown:
        words = [w for w in shlex.split(line.replace("...", ""), posix=True)[1:]
                 if w not in ("[--json]", "|")]
        group, command = main, None
        global_options = options_of(main) | {"--help", "-h"}
        while words and words[0].startswith("-"):
            assert words[0] in global_options, f"{page.name}: {line}: {words[0]}"
            words.pop(0)
        if not words:
            continue
        command = group.commands.get(words[0])
        assert command, f"{page.name}: `{line}`: no subcommand {words[0]!r}"
        if isinstance(command, click.Group):
            command = command.commands.get(words[1]) if len(words) > 1 else command
            assert command, f"{page.name}: `{line}`: no subcommand {words[:2]}"
        for word in words:
            flag = word.strip("[]").split("=")[0]
            if flag.startswith("--"):
                assert flag in options_of(command) | {"--help"}, \
                    f"{page.name}: `{line}`: {command.name} has no option {flag}"
    if page.name == "README.md":
        assert len(shown) >= 8  # the commands a user types


def test_the_readme_is_a_front_door():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "make demo" in text and "make test" in text
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in text, f"README does not link docs/{page.name}"


def test_the_settings_reference_is_the_settings_table():
    text = (REPO / "docs" / "grids.md").read_text()
    start = text.index("<!-- settings table:")
    table = text[text.index("\n", start) + 1:text.index("<!-- end of the settings table -->")]
    assert table.strip() == reference_table(), \
        "docs/grids.md's settings table is not common/grids/settings.py's: regenerate it with " \
        "python -c 'from xbench.common.grids.columns import reference_table; " \
        "print(reference_table())'"
