"""`python -m reports.page.screenshot PAGE PNG [--width W --height H]`: a PNG of a report page,
taken by headless Chromium (Debian's `chromium`), e.g. for the README.

`chromium_command` is the one place that knows how to start the browser; the browser test uses it.
"""
import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from xbench.common.errors import UserError

NAMES = ("chromium", "chromium-browser", "google-chrome")
# Headless, as root, isolated: no sandbox (root), no GPU, and nothing that reaches the network.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio")


def chromium_command(user_data_dir, *flags):
    """The command line starting headless Chromium with a fresh profile in `user_data_dir`."""
    browser = next((shutil.which(name) for name in NAMES if shutil.which(name)), None)
    if browser is None:
        raise UserError("Chromium not found; install Debian's package: "
                        "apt-get update && apt-get install -y chromium")
    return [browser, *FLAGS, f"--user-data-dir={user_data_dir}", *flags]


def screenshot(page, png, width=1280, height=2000, timeout=180):
    """Render `page` (an HTML file) and save what fits in width x height pixels to `png`."""
    page, png = Path(page).resolve(), Path(png).resolve()
    if not page.is_file():
        raise UserError(f"{page} is not a file; give the report's index.html")
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        command = chromium_command(profile, f"--screenshot={png}",
                                   f"--window-size={width},{height}", page.as_uri())
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not png.is_file():
        raise UserError(f"Chromium could not take the screenshot (exit {done.returncode}): "
                        f"{done.stderr.strip()[-500:]}")
    return png


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page")
    parser.add_argument("png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2000)
    args = parser.parse_args(argv)
    try:
        print(screenshot(args.page, args.png, args.width, args.height))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
