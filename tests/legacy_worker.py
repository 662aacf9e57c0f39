#!/usr/bin/env python3
"""An honest worker that speaks only the legacy wire protocol (issue 15's
end-to-end test, tests/test_trust_e2e.c): what the original Python workers
send, and nothing the coordinator added since.

  legacy_worker.py --url URL --token-file FILE --worker-id ID --exe DONTO_EMBED
                   --model DIR [-n N] [--idle-sleep S] [--status FILE]

Loop: POST {url}/lease {"worker_id", "n", "target": null}; embed the batch's
texts by running `DONTO_EMBED embed --model DIR --precision fp32 --threads 1`
(JSONL in, JSONL out); POST {url}/submit {"worker_id", "items": [{"target",
"item_id", "vector": [numbers]}]}: JSON numbers, no lease_id, no model field,
no /extend, no /release. The answer's body is not read beyond its status
("rejected" is ignored, as a legacy worker would). Any failed request (no
answer, 4xx, 5xx) sleeps a second and tries again, as the legacy worker's
generic error path did (it knows neither 429 nor 403). An empty batch sleeps
--idle-sleep. SIGTERM/SIGINT: exit 0 after the batch in hand (the test stops
it only when nothing is leased). Standard library only.

--status FILE gets one line of key=value counters after every round.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

stop = False


def on_signal(signum, frame):
    global stop
    stop = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--worker-id", required=True)
    ap.add_argument("--exe", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--idle-sleep", type=float, default=0.5)
    ap.add_argument("--status")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with open(a.token_file) as f:
        token = f.readline().strip()
    # Loopback only: no proxy from the environment.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    st = {"leases": 0, "items": 0, "submits": 0, "upserted": 0, "errors": 0}
    tmp = tempfile.mkdtemp(prefix="legacy-worker-")

    def post(route, body):
        req = urllib.request.Request(a.url.rstrip("/") + "/" + route, data=json.dumps(body).encode(),
                                     headers=headers, method="POST")
        try:
            with opener.open(req, timeout=120) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (urllib.error.URLError, OSError):
            return 0, b""

    def status():
        if a.status:
            with open(a.status + ".tmp", "w") as f:
                f.write(" ".join(f"{k}={v}" for k, v in st.items()) + "\n")
            os.replace(a.status + ".tmp", a.status)

    while not stop:
        code, body = post("lease", {"worker_id": a.worker_id, "n": a.n, "target": None})
        if code != 200:
            st["errors"] += 1
            status()
            time.sleep(1)
            continue
        batch = json.loads(body).get("batch") or []
        st["leases"] += 1
        if not batch:
            status()
            time.sleep(a.idle_sleep)
            continue
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            for i, it in enumerate(batch):
                f.write(json.dumps({"id": i, "text": it["text"]}) + "\n")
        subprocess.run([a.exe, "embed", "--model", a.model, "--in", inp, "--out", out, "--precision", "fp32",
                        "--threads", "1", "--quiet"], check=True)
        vecs = {}
        with open(out, encoding="utf-8") as f:
            for line in f:
                o = json.loads(line)
                vecs[int(o["id"])] = o["vector"]
        items = [{"target": it["target"], "item_id": it["item_id"], "vector": vecs[i]} for i, it in enumerate(batch)]
        st["items"] += len(items)
        while True:
            code, body = post("submit", {"worker_id": a.worker_id, "items": items})
            st["submits"] += 1
            if code == 200:
                st["upserted"] += int(json.loads(body).get("upserted", 0))
                break
            st["errors"] += 1
            status()
            if stop:
                break
            time.sleep(1)
        status()
    status()
    for p in ("in.jsonl", "out.jsonl"):
        try:
            os.unlink(os.path.join(tmp, p))
        except OSError:
            pass
    os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
