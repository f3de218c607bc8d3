"""Test harness: the real opjournal binary on free ports, and a tiny HTTP
provider that counts its calls.

The binary is built once per test run with `go build` from the repository
root (set OPJOURNAL_BIN to use a prebuilt one, GO to pick the go command).
Each Server runs `opjournal serve` on a fresh SQLite file with both
listeners on port 0, and learns its addresses from the JSON log line
{"msg":"serving","grpc_addr":...}: no sleeps, no port guessing.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYROOT = HERE.parent  # client/python
ROOT = PYROOT.parent.parent  # the repository
sys.path.insert(0, str(PYROOT))

import opjournal  # noqa: E402  (the package under test, from this tree)

_build_lock = threading.Lock()
_bin = None
_tmpdirs = []


def _cleanup():
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)


def tmpdir(prefix="opjournal-py-"):
    d = tempfile.mkdtemp(prefix=prefix)
    _tmpdirs.append(d)
    return d


def opjournal_bin() -> str:
    """The opjournal binary: $OPJOURNAL_BIN, or built once into a temp dir."""
    global _bin
    with _build_lock:
        if _bin is None:
            env_bin = os.environ.get("OPJOURNAL_BIN")
            if env_bin:
                _bin = os.path.abspath(env_bin)
            else:
                out = os.path.join(tmpdir("opjournal-bin-"), "opjournal")
                go = os.environ.get("GO", "go")
                r = subprocess.run([go, "build", "-o", out, "./cmd/opjournal"], cwd=str(ROOT),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if r.returncode != 0:
                    raise RuntimeError("go build ./cmd/opjournal failed:\n" + r.stdout)
                _bin = out
        return _bin


def policy_file(text: str) -> str:
    """Writes a policy YAML into a fresh temp dir and returns its path, for
    Server("--policy", path). Keep its actions free of redact_fields (then
    the server needs no request-hash key)."""
    path = os.path.join(tmpdir(), "policy.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def wait_for(cond, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """Polls cond() until it returns something truthy, and returns that;
    raises AssertionError after ``timeout`` seconds."""
    import time
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() >= end:
            raise AssertionError("timed out after %gs waiting for %s" % (timeout, what))
        time.sleep(interval)


def new_key(prefix="payment") -> str:
    return "%s:%s:intent-01" % (prefix, uuid.uuid4().hex[:12])


class Server:
    """`opjournal serve` on free ports with a fresh SQLite journal; ``env``
    adds to (or overrides) its environment."""

    def __init__(self, *extra_args: str, ready_timeout: float = 60.0, env=None):
        self.dir = tmpdir()
        self.lines = collections.deque(maxlen=500)
        self.info = None
        self._ready = threading.Event()
        args = [opjournal_bin(), "serve",
                "--database-url", "sqlite://" + os.path.join(self.dir, "j.db"),
                "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", *extra_args]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(ready_timeout) or self.info is None:
            self.stop()
            raise RuntimeError("opjournal serve did not report \"serving\":\n" + self.log())
        self.grpc_addr = self.info["grpc_addr"]
        self.http_addr = self.info["http_addr"]

    def _read(self):
        # Reads stderr to the end (so the pipe never fills), noting the
        # "serving" line; EOF before it means the process died.
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if self.info is None:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("msg") == "serving":
                    self.info = rec
                    self._ready.set()
        self._ready.set()

    def log(self) -> str:
        return "\n".join(self.lines)

    def journal(self, **kw) -> opjournal.Journal:
        kw.setdefault("timeout", 5.0)
        kw.setdefault("worker_id", "py-test")
        return opjournal.Journal(self.grpc_addr, **kw)

    def stop(self, kill: bool = False):
        """Stops the server: SIGTERM (a graceful stop), or SIGKILL with kill."""
        if self.proc.poll() is None:
            if kill:
                self.proc.kill()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        if self.proc.stderr:
            self.proc.stderr.close()


def make_token(name: str, tenant: str, roles: str):
    """Runs `opjournal token` and returns (token, tokens-file entry)."""
    out = subprocess.run([opjournal_bin(), "token", "--name", name, "--tenant", tenant, "--roles", roles],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    # The entry is the list item after the token, without a "tokens:" line
    # (newer `opjournal token` prints one for a new file).
    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("#") and ln.strip() != "tokens:"]
    token = lines[0].strip()
    entry = "\n".join(ln for ln in lines[1:]) + "\n"
    return token, entry


class Provider:
    """A payment provider over HTTP that counts its calls.

    POST /payments answers according to ``mode``: "ok" (201 with
    {"id": "pay_N", "status": "captured"}), "reject" (400), "503", or
    "hang" (waits for ``release`` to be set, then answers 201). ``calls``
    counts the POSTs (on any path); ``keys`` holds their Idempotency-Key
    headers and ``paths`` their paths;
    ``entered`` is set when a request arrives."""

    def __init__(self):
        self.calls = 0
        self.keys = []
        self.paths = []
        self.mode = "ok"
        self.release = threading.Event()
        self.entered = threading.Event()
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                with provider._lock:
                    provider.calls += 1
                    num = provider.calls
                    provider.keys.append(self.headers.get("Idempotency-Key"))
                    provider.paths.append(self.path)
                    mode = provider.mode
                provider.entered.set()
                if mode == "hang":
                    provider.release.wait(10)
                if mode == "reject":
                    self._send(400, {"error": "card_declined"})
                elif mode == "503":
                    self._send(503, {"error": "try later"})
                else:
                    self._send(201, {"id": "pay_%d" % num, "status": "captured"})

            def _send(self, code, obj):
                body = json.dumps(obj).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda *a: None
        self.url = "http://127.0.0.1:%d/payments" % self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def pay(self, key: str, payload: dict, timeout: float = 5.0):
        """What an agent's fn does: POST the payment with the key as
        Idempotency-Key, classify the answer, return the Effect."""
        req = opjournal_request(self.url, key, payload)
        with opjournal.urlopen(req, timeout=timeout) as resp:
            p = json.loads(resp.read())
        return opjournal.Effect(external_id=p["id"], result={"payment_id": p["id"], "status": p["status"]})

    def stop(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def opjournal_request(url, key, payload):
    import urllib.request
    return urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                  headers={"Content-Type": "application/json", "Idempotency-Key": key})
