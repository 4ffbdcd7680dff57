"""`xbench report`'s page escaped and rendered in headless Chromium, checked through the DevTools
protocol."""
import fcntl
import html
import json
import os
import re
import select
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers import REPO
from tests.report_fixtures import as_contended, hostile_rows, write_rows
from xbench.common.results.store import read_rows
from xbench.reports.page.build import build_report
from xbench.reports.page.screenshot import chromium_command, screenshot

REPEATS, TIME_TO_ACCURACY, KNOBS = (REPO / "tests" / "data" / f"{name}.jsonl"
                                    for name in ("repeats", "time-to-accuracy", "knobs"))


class DevTools:
    """Headless Chromium driven over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-separated
    JSON): no extra package, and the browser's own events say what loaded and what failed."""

    def __init__(self, profile, timeout=120):
        to_browser, self.send_fd = os.pipe()
        self.receive_fd, from_browser = os.pipe()
        # Above fd 4, so that bash's "3<&a 4>&b" cannot overwrite one end with the other.
        to_browser, from_browser = (high_fd(to_browser), high_fd(from_browser))
        command = chromium_command(profile, "--remote-debugging-pipe", "about:blank")
        self.process = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}', *command],
            pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self.deadline = time.monotonic() + timeout
        self.buffer, self.events, self.last_id = b"", [], 0

    def close(self):
        """Ask the browser to quit (so it stops writing its profile); kill it if it does not."""
        os.write(self.send_fd, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.send_fd)
        os.close(self.receive_fd)

    def call(self, method, params=None, session=None):
        self.last_id += 1
        message = {"id": self.last_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.send_fd, json.dumps(message).encode() + b"\0")
        while True:
            reply = self.receive()
            if reply.get("id") == self.last_id:
                assert "error" not in reply, (method, reply)
                return reply["result"]

    def wait_for(self, method):
        while not any(e["method"] == method for e in self.events):
            self.receive()

    def receive(self):
        while b"\0" not in self.buffer:
            left = self.deadline - time.monotonic()
            ready = left > 0 and select.select([self.receive_fd], [], [], left)[0]
            assert ready, "Chromium did not answer in time"
            chunk = os.read(self.receive_fd, 1 << 16)
            assert chunk, "Chromium closed the DevTools pipe"
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        message = json.loads(raw)
        if "method" in message:
            self.events.append(message)
        return message


def high_fd(fd):
    """`fd` moved to a number of 10 or more."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


def render_in_chromium(page, width=1400):
    """(image loaded flags, console errors, number of script elements) of `page` once loaded in
    a window `width` pixels wide."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        browser = DevTools(profile)
        try:
            target = next(t for t in browser.call("Target.getTargets")["targetInfos"]
                          if t["type"] == "page")
            session = browser.call("Target.attachToTarget",
                                   {"targetId": target["targetId"], "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                browser.call(f"{domain}.enable", session=session)
            browser.call("Emulation.setDeviceMetricsOverride",
                         {"width": width, "height": 900, "deviceScaleFactor": 1,
                          "mobile": False}, session)
            browser.call("Page.navigate", {"url": Path(page).resolve().as_uri()}, session)
            browser.wait_for("Page.loadEventFired")
            probe = ("JSON.stringify({images: [...document.images].map(i => i.complete && "
                     "i.naturalWidth > 0), scripts: document.scripts.length, headings: "
                     "[...document.querySelectorAll('h1,h2,h3')].map(h => h.textContent), "
                     "text: document.body.innerText, height: "
                     "document.documentElement.scrollHeight, folded: [...document."
                     "querySelectorAll('details')].map(d => [d.className, d.open]), scaled: "
                     "[...document.images].filter(i => i.width < i.naturalWidth).map(i => i.alt),"
                     " order: [...document.querySelectorAll('#decision, #verdicts, figure, "
                     "details')].map(e => e.id || e.tagName)})")
            found = json.loads(browser.call("Runtime.evaluate", {"expression": probe,
                                                                  "returnByValue": True},
                                            session)["result"]["value"])
        finally:
            browser.close()
    errors = [e for e in browser.events
              if e["method"] == "Runtime.exceptionThrown"
              or (e["method"] == "Runtime.consoleAPICalled"
                  and e["params"]["type"] in ("error", "assert"))
              or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    render_in_chromium.last = found  # headings and visible text, for the page's checks
    return found["images"], errors, found["scripts"]


def test_the_checker_sees_broken_images_and_errors(tmp_path):
    """The browser check itself: a page with a missing image and a throwing script fails it."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><img src="missing.png">'
                    '<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">'
                    '<script>throw new Error("boom")</script></body></html>')
    images, errors, _ = render_in_chromium(page)
    assert images == [False, False]
    assert any("boom" in json.dumps(e) for e in errors)
    assert any("missing.png" in json.dumps(e) for e in errors)


def test_report_page_is_escaped_and_renders_in_chromium_with_every_figure(tmp_path):
    results = write_rows(tmp_path / "hostile.jsonl", hostile_rows())
    _, _, written = build_report([results], tmp_path / "out", formats=["html"])
    page = written["html"].read_text()
    assert "<script" not in page and '<img src="nowhere' not in page
    assert "&lt;script&gt;console.error(&#x27;escaped?&#x27;)&lt;/script&gt;" in page
    assert "&lt;img src=&quot;nowhere.png&quot;" in page
    images, errors, scripts = render_in_chromium(written["html"])
    # 8: no predicted.png, its one backend held out of its own calibration (nothing else measured)
    assert len(images) == page.count("<figure") == 8 and all(images)
    assert errors == []
    assert scripts == 0
    seen = render_in_chromium.last
    assert len(seen["headings"]) == len(set(seen["headings"]))  # no heading twice
    # one global batch and one dataset multiple: figures 5b and 5e say what they would need
    assert ("Figure 5b: epoch-2 rate vs batch size: not drawn: it needs cells at two or more "
            "batch sizes; these results have only 128" in seen["text"])
    assert "Figure 5e: epoch-2 rate vs dataset multiple: not drawn" in seen["text"]
    assert "step_parts" not in seen["text"] and "No data for" not in seen["text"]
    shot = screenshot(written["html"], tmp_path / "shot.png", height=800)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_recorded_rows_page_reads_decision_verdicts_figures_methods_folded(tmp_path):
    """The recorded rows' page (contended runs kept: every figure drawn) at 1,400 px: the
    decision, then the verdicts, then figures; every section's methods folded (and its long
    tables), no figure shrunk to fit, and the whole far shorter than before (23,071 px on these
    rows, with methods open and fig5a-d one below another; a user scrolled 17,269 px)."""
    _, _, written = build_report([REPEATS, TIME_TO_ACCURACY], tmp_path / "out",
                                 formats=["html"], include_contended=True)
    images, errors, _ = render_in_chromium(written["html"])
    seen = render_in_chromium.last
    assert all(images) and errors == []
    assert seen["order"][:3] == ["decision", "verdicts", "DETAILS"]  # section 1's methods
    assert seen["order"].index("fig5d_epoch1_vs_epoch2") < seen["order"].index("scaling")
    methods = [is_open for kind, is_open in seen["folded"] if kind == "methods"]
    assert len(methods) == seen["text"].count("How these were measured") >= 10
    assert not any(is_open for _, is_open in seen["folded"])
    assert ("table", False) in map(tuple, seen["folded"])  # the cells' table, 22 rows
    assert seen["scaled"] == []
    assert seen["height"] < 15_000


def test_the_knobs_page_shows_its_answers_unfolded_and_its_contended_runs_on_the_decision(
        tmp_path):
    """The knobs preset's recorded rows (tests/data/record.py), every run contended
    (tests.report_fixtures.as_contended), with --include-contended, in the browser: every answer
    of Accumulation and Compiled or eager is read without opening anything (their methods stay
    folded), and the banner above the decision and the decision's table say which runs were
    contended; without --include-contended neither does."""
    knobs = write_rows(tmp_path / "knobs.jsonl", as_contended(read_rows(KNOBS)[0]))
    _, _, written = build_report([knobs], tmp_path / "out", formats=["html"],
                                 include_contended=True)
    page = written["html"].read_text()
    images, errors, _ = render_in_chromium(written["html"])
    seen = render_in_chromium.last
    assert all(images) and errors == []
    answers = [html.unescape(a) for a in re.findall(r'<p class="answer">(.*?)</p>', page)]
    for backend in ("pt-ddp", "hvd-torch", "tf-multiworker", "jax-multiprocess"):
        assert any(a.startswith(f"{backend} on 2 devices, link=400mbit, K=4: syncing once")
                   for a in answers), answers
    assert any(": compiled against not: " in a for a in answers), answers
    visible = seen["text"]
    assert all(a in visible for a in answers)
    assert "their gradients summed into one update" not in visible  # its methods, folded
    assert not any(is_open for _, is_open in seen["folded"])
    banner = visible.index("CONTENDED RUNS INCLUDED (--include-contended)")
    assert banner < visible.index("The decision")
    assert re.search(r"⚠ \d+ of \d+ runs? contended", visible[visible.index("The decision"):])
    _, _, plain = build_report([knobs], tmp_path / "plain", formats=["html"])
    assert "CONTENDED RUNS INCLUDED" not in plain["html"].read_text()
    assert "runs contended" not in plain["html"].read_text()
