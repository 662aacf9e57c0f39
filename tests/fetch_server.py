#!/usr/bin/env python3
"""Loopback stand-in for the Hugging Face hub, for tests/fetch_test.c.

Serves the files under --root at their plain paths (the test lays them out as
<root>/<repo>/resolve/<revision>/<path>), binds 127.0.0.1 on an ephemeral
port, writes that port to --port-file, and logs one line per request to --log
*before* answering, so the client can read the log as soon as it has its
response.  It never contacts anything and exits by itself after --lifetime
seconds even if nobody stops it.

Behaviour switches, one per failure the client must survive:
  --redirect        *.safetensors answer 302 -> /_lfs/<path> (the hub sends
                    LFS files to its CDN this way)
  --ignore-range    answer every GET with 200 and the whole file
  --drop-after N    first GET of a file bigger than N: promise the full
                    length, send N bytes, close the connection
  --stall-after N   every GET of a file bigger than N: send N bytes, then
                    go silent until the client gives up
"""
import argparse
import http.server
import os
import re
import threading
import time
import urllib.parse

RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")


class Handler(http.server.BaseHTTPRequestHandler):
    # Keep-alive, like the hub: the client reuses one connection for all files.
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet: the request log is our output
        pass

    def do_GET(self):
        self._handle(send_body=True)

    def do_HEAD(self):
        self._handle(send_body=False)

    def _log(self, path, status):
        rng = self.headers.get("Range") or "-"
        auth = self.headers.get("Authorization") or "-"
        self.server.log_line(f"{self.command} {path} range={rng} auth={auth} status={status}")

    def _simple(self, path, status, body=b"", headers=()):
        self._log(path, status)
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self, send_body):
        cfg = self.server.cfg
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        if cfg.redirect and path.endswith(".safetensors") and not path.startswith("/_lfs/"):
            self._simple(path, 302, headers=[("Location", "/_lfs" + path)])
            return
        rel = path[len("/_lfs/"):] if path.startswith("/_lfs/") else path.lstrip("/")
        parts = rel.split("/")
        full = os.path.join(cfg.root, *parts)
        if any(p in ("", ".", "..") for p in parts) or not os.path.isfile(full):
            self._simple(path, 404, b"Entry not found\n", [("Content-Type", "text/plain")])
            return
        size = os.path.getsize(full)
        start, status = 0, 200
        m = RANGE_RE.match(self.headers.get("Range") or "")
        if m and not cfg.ignore_range:
            start = int(m.group(1))
            if start >= size:
                self._simple(path, 416, headers=[("Content-Range", f"bytes */{size}")])
                return
            status = 206
        end = size  # exclusive; only open-ended ranges are needed here
        limit = end - start
        drop = stall = False
        if send_body and cfg.drop_after and size > cfg.drop_after:
            with self.server.lock:
                if path not in self.server.dropped:
                    self.server.dropped.add(path)
                    drop = True
                    limit = min(limit, cfg.drop_after)
        if send_body and cfg.stall_after and size > cfg.stall_after:
            stall = True
            limit = min(limit, cfg.stall_after)

        self._log(path, status)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "none" if cfg.ignore_range else "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        if not send_body:
            return
        with open(full, "rb") as f:
            f.seek(start)
            left = limit
            while left > 0:
                chunk = f.read(min(65536, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)
        self.wfile.flush()
        if stall:
            # Go silent with the connection open; the client's low-speed
            # timeout must end the transfer.  Bounded so the thread ends.
            time.sleep(cfg.stall_seconds)
        if drop or stall:
            self.close_connection = True

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up; that is its right


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, cfg):
        super().__init__(("127.0.0.1", 0), Handler)
        self.cfg = cfg
        self.lock = threading.Lock()
        self.dropped = set()
        self.log_file = open(cfg.log, "a", buffering=1)

    def log_line(self, line):
        with self.lock:
            self.log_file.write(line + "\n")
            self.log_file.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--lifetime", type=float, default=120.0)
    ap.add_argument("--redirect", action="store_true")
    ap.add_argument("--ignore-range", action="store_true")
    ap.add_argument("--drop-after", type=int, default=0)
    ap.add_argument("--stall-after", type=int, default=0)
    ap.add_argument("--stall-seconds", type=float, default=20.0)
    cfg = ap.parse_args()

    srv = Server(cfg)
    # Stop by ourselves no matter what: a test that crashed must not leave
    # a server behind.
    threading.Timer(cfg.lifetime, lambda: os._exit(0)).start()
    tmp = cfg.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, cfg.port_file)  # atomic: the reader never sees half a number
    srv.serve_forever()


if __name__ == "__main__":
    main()
