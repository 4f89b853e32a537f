"""Headless Chromium driven over the DevTools protocol on a pipe (no port, no extra package).

`--remote-debugging-pipe` makes Chromium read NUL-terminated JSON commands on fd 3
and write replies and events on fd 4. We open one page, collect every script
error and every request it makes, evaluate expressions in it, and screenshot it.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    def __init__(self, binary: str, timeout_s: float = 30.0):
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="roadgate-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_pipes():  # in the child: its fd 3 reads our commands, fd 4 carries its replies
            high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)  # out of the way of 3 and 4 first
            high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)  # dup2 makes them inheritable; the pipes' own fds are not
            os.dup2(high_w, 4)

        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "--window-size=1280,900",
             "about:blank"],
            preexec_fn=wire_pipes, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=True)

    def send(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout_s
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("no message from chromium")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str) -> None:
        """Navigates and waits for the load event."""
        self.send("Page.navigate", {"url": url}, session=True)
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read())

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluating failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def script_errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls, and errors the browser logged (a failed load, CSP, ...)."""
        errors = []
        for e in self.events:
            params = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                errors.append(params["exceptionDetails"].get("exception", {}).get("description")
                              or params["exceptionDetails"].get("text"))
            elif e.get("method") == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
            elif e.get("method") == "Log.entryAdded" and params["entry"].get("level") == "error":
                errors.append(params["entry"].get("text"))
        return errors

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: Path) -> None:
        """The whole page, not just the window."""
        size = self.send("Page.getLayoutMetrics", session=True)["cssContentSize"]
        shot = self.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}}, session=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)
