# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""report.html as a person sees it: opened from disk in a real headless browser (Debian's chromium, driven
through its own chromedriver by Selenium), with no network.

The report is the one our code writes for tests/fixtures/run-demo on two hosts, so it has two plots. A full-page
screenshot of it is kept as a test artefact: tests/output/report-browser/report.png (gitignored, not in the
Galaxy artifact), overwritten by each run.
"""
from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
import time
import typing as t
from pathlib import Path

import pytest
from matplotlib import image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from ansible_collections.llmops.sglang.plugins.plugin_utils import run_report
from ansible_collections.llmops.sglang.plugins.plugin_utils.run_dir import write_files

REPO_ROOT = Path(__file__).resolve().parents[4]
DEMO_RUN = REPO_ROOT / "tests" / "fixtures" / "run-demo"
SCREENSHOT = REPO_ROOT / "tests" / "output" / "report-browser" / "report.png"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# The network here is closed: without the background-networking flags Chromium's own connections (component
# updates, sync, QUIC probes) are attempted and refused, many at a time.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1280,900")
# A plot with its axes, lines and labels covers far more of its box than this; a blank or broken one covers none.
MIN_PLOT_INK = 0.03
# Every element that can show a plot; an <svg> inside another is part of that plot.
PLOT_ELEMENTS = "img, svg:not(svg svg)"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """The demo run on a fleet of two hosts (gpu2 a copy of gpu1) with its report written as the pipeline does."""
    run_dir = Path(shutil.copytree(DEMO_RUN, tmp_path / "run"))
    for stage in run_report.STAGES:
        if (run_dir / stage / "gpu1").is_dir():
            shutil.copytree(run_dir / stage / "gpu1", run_dir / stage / "gpu2")
    write_files(run_dir, run_report.report_files(run_dir))
    return run_dir


def _processes_of(home: Path, driver_pid: int) -> list[str]:
    """chromedriver and every Chromium process (each names the profile under ``home`` in its command line) that
    still runs. Zombies have ended: Chromium's crash handlers are reparented to PID 1, which need not reap them."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended while listed
            continue
        if state != "Z" and (int(proc.name) == driver_pid or str(home) in command):
            found.append(f"{proc.name}: {command[:150]}")
    return found


def _wait_ended(home: Path, driver_pid: int, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := _processes_of(home, driver_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@contextlib.contextmanager
def chromium(home: Path) -> t.Iterator[webdriver.Chrome]:
    """Debian's chromium under its chromedriver with a new empty profile; HOME is ``home`` too, since Chromium keeps
    its crash reports and caches there. On leaving, the browser is quit and none of its processes may be left."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    if missing:
        pytest.fail(f"missing {', '.join(missing)} (Debian's chromium and chromium-driver): run `make setup` as root")
    home.mkdir()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={home / 'profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})  # DevTools' Network events
    # The driver's path is given, so Selenium Manager (which would look for and download one) never runs.
    service = Service(str(CHROMEDRIVER), env={**os.environ, "HOME": str(home)},
                      log_output=str(home / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver_pid = service.process.pid
    try:
        yield driver
    finally:
        driver.quit()
    assert _wait_ended(home, driver_pid) == [], "the browser outlived its session"


def _requests(driver: webdriver.Chrome) -> list[str]:
    """The URL of every request in DevTools' Network events since the last call (the performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
        elif message["method"] == "Network.webSocketCreated":
            urls.append(message["params"]["url"])
    return urls


def _ink(png: bytes) -> float:
    """The share of an element screenshot's pixels that are not the white background."""
    pixels = image.imread(io.BytesIO(png))[..., :3]
    return float((pixels < 0.95).any(axis=-1).mean())


def _check_plots_visible(driver: webdriver.Chrome, hosts: list[str]) -> None:
    plots = driver.find_elements(By.CSS_SELECTOR, PLOT_ELEMENTS)
    assert len(plots) == len(hosts), f"{len(plots)} plot elements for the plots of {hosts}"
    for index, plot in enumerate(plots):
        if plot.tag_name == "img":
            assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", plot), \
                f"image {plot.get_attribute('src')!r} is broken"
        assert plot.is_displayed() and plot.size["width"] > 0 and plot.size["height"] > 0, f"plot {index} has no box"
        assert _ink(plot.screenshot_as_png) > MIN_PLOT_INK, f"plot {index} is blank where it is shown"


def _save_full_page(driver: webdriver.Chrome, path: Path) -> None:
    """The whole page, not only the window: DevTools' screenshot beyond the viewport, clipped to the content."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                             "clip": clip})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))


@pytest.mark.timeout(120)
def test_report_renders_offline_with_its_plots_visible(run_dir, tmp_path, capsys):
    page = (run_dir / "report.html").as_uri()
    hosts = sorted(path.stem for path in (run_dir / "plots").glob("*.svg"))
    title = f"SGLang tuning run {json.loads((run_dir / 'run.json').read_text())['run_id']} (emulated)"
    assert hosts == ["gpu1", "gpu2"]
    with chromium(tmp_path / "home") as driver:
        driver.get("about:blank")
        _requests(driver)  # the start page's own requests are not the report's
        driver.get(page)
        assert driver.title == title
        heading = driver.find_element(By.TAG_NAME, "h1")
        assert heading.is_displayed() and heading.text == title
        _check_plots_visible(driver, hosts)
        _save_full_page(driver, SCREENSHOT)
        requests = _requests(driver)
    assert page in requests, "the page's own load is missing from the record: the record sees nothing"
    assert [url for url in requests if url != page and not url.startswith(("data:", "about:"))] == []
    with capsys.disabled():
        print(f"\nreport.html screenshot: {SCREENSHOT}")


# Every element that sticks out to the right of the window, but for a table's cells: a wide table scrolls in its box.
OVERFLOWING = """const width = document.documentElement.clientWidth;
return [...document.querySelectorAll('body *')].filter(e => !e.closest('table') && !e.closest('svg')
    && e.getBoundingClientRect().right > width + 1).map(e => e.tagName + ': ' + e.textContent.slice(0, 80));"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("width", [1400, 1280], ids=["desktop", "laptop"])
def test_report_fits_the_window_and_marks_the_emulated_numbers(run_dir, tmp_path, width):
    """No horizontal scrolling of the page (long config paths in the server's warnings wrap), and the emulated run
    says so above its numbers and in its outcome table."""
    with chromium(tmp_path / "home") as driver:
        driver.set_window_size(width, 900)
        driver.get((run_dir / "report.html").as_uri())
        assert driver.execute_script(OVERFLOWING) == []
        assert driver.execute_script("return document.documentElement.scrollWidth") <= width
        note = driver.find_element(By.TAG_NAME, "blockquote")
        assert note.is_displayed() and note.text.startswith("Emulated: nothing here was measured on a GPU.")
        assert note.location["y"] < driver.find_element(By.TAG_NAME, "table").location["y"]
        hosts = [cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "table:first-of-type tbody td:first-child")]
        assert hosts == ["gpu1 (emulated)", "gpu2 (emulated)"]
