#!/usr/bin/env python3
"""Checks /dashboard in headless Chromium against a running `clockwork serve` under load.

Usage: dashboard_check.py ADDRESS DEVICES SCREENSHOT -- LOADGEN COMMAND...

Drives Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe: commands on
its fd 3, answers on its fd 4, each a JSON text ended by a NUL byte), so it needs only the
standard library. Starts the load generator, then checks that the page goes live and
draws bars on every device's lanes, saves a screenshot while the load runs, and once the
load is over checks that the counts the page shows are those of /metrics.
"""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

WIDTH, HEIGHT = 1280, 240


class Browser:
    """One headless Chromium and one page, driven over the DevTools pipe."""

    def __init__(self, binary, profile):
        to_browser, self._to = os.pipe()
        self._from, from_browser = os.pipe()

        def wire():
            # Through fresh descriptors: a pipe end may already be 3 or 4, and dup2 onto
            # itself would leave it closed on exec.
            read, write = os.dup(to_browser), os.dup(from_browser)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=wire, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._next = 0
        self._buffer = b""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self.session = attached["sessionId"]

    def call(self, method, params=None, session=None):
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read()
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def _read(self):
        while b"\0" not in self._buffer:
            chunk = os.read(self._from, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        text, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(text)

    def page(self, method, params=None):
        return self.call(method, params, self.session)

    def eval(self, expression):
        result = self.page("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result["result"].get("value")

    def close(self):
        self.proc.kill()
        self.proc.wait()


def wait_for(what, check, timeout):
    """Calls check() until it returns a true value; fails with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    sys.exit(f"dashboard check: {what} (after {timeout} s; last: {check()})")


def metrics(address):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        return response.read().decode()


def metric(text, model, outcome):
    pattern = rf'^clockwork_requests\{{model="{re.escape(model)}",outcome="{outcome}"\}} (\S+)$'
    found = re.search(pattern, text, re.MULTILINE)
    return int(float(found.group(1))) if found else None


SHOWN = """[...document.querySelectorAll('#models tbody tr')].map(r => [r.dataset.model,
  +r.querySelector('td.ok').textContent, +r.querySelector('td.late').textContent])"""


def numbers_match(browser, address):
    """The page's rows, if every one matches /metrics (and there are some)."""
    rows = browser.eval(SHOWN) or []
    text = metrics(address)
    for model, ok, late in rows:
        if (ok, late) != (metric(text, model, "ok"), metric(text, model, "late")):
            return None
    return rows


def main():
    address, devices, screenshot = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    loadgen = sys.argv[sys.argv.index("--") + 1:]
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if not binary:
        sys.exit("dashboard check: chromium is not installed")
    profile = tempfile.mkdtemp(prefix="dashboard-chromium-")
    browser = Browser(binary, profile)
    load = subprocess.Popen(loadgen, stdout=subprocess.DEVNULL)
    try:
        browser.page("Emulation.setDeviceMetricsOverride",
                     {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
        browser.page("Page.navigate", {"url": f"http://{address}/dashboard"})
        wait_for("the page never went live",
                 lambda: browser.eval("document.getElementById('status')?.textContent") == "live",
                 20)
        # Bars drawn now, per device; and measured bars the page has folded in so far
        # (a device may idle for a moment while the other takes the load).
        drawn = "[...Array(%d).keys()].map(d => document.querySelectorAll(" \
            "`rect.bar[data-device=\"${d}\"]`).length)" % devices
        seen = "[...Array(%d).keys()].map(d => window.clockworkDashboard.measured[d] || 0)" % devices

        def every_device():
            counts = browser.eval(seen)
            return counts if counts and min(counts) > 0 else None

        bars = wait_for("some device never showed a measured bar", every_device, 30)
        wait_for("no bars drawn", lambda: sum(browser.eval(drawn) or [0]) > 0, 10)
        print(f"dashboard check: measured bars per device {bars}, drawn now {browser.eval(drawn)}")
        # Let the load build up a full window before the picture.
        time.sleep(2)
        png = browser.page("Page.captureScreenshot", {"format": "png"})["data"]
        with open(screenshot, "wb") as out:
            out.write(base64.b64decode(png))
        print(f"dashboard check: screenshot {screenshot}")
        if load.wait(timeout=120) != 0:
            sys.exit("dashboard check: the load generator failed")
        rows = wait_for("the page's counts never matched /metrics",
                        lambda: numbers_match(browser, address), 15)
        print(f"dashboard check: the page's counts match /metrics: {rows}")
    finally:
        load.kill()
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
