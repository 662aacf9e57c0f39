#!/usr/bin/env python3
"""POST /sheaf/infer and GET /sheaf/models end to end (docs/sheaf-serving.md "Serving").

  sheaf_serve.py --build BUILD [--python PY] [--ref tests/ref/sheaf_ref.py] [--work DIR]

A planted substrate (donto-sheaf gen-substrate) is exported (arg_link), two small models are
trained on it (diag and gcn), registered through the parity gate (the PyTorch reference run as
a command) and the first activated; `donto-embed serve` runs on the database. Then:
  - roles: no token 401; contributor and reader tokens 403 on both routes; analyst and admin 200;
    an analyst gets 403 on the work queue;
  - a 100-node request graph (a cut of the export with the arg_link pairs among its nodes) is
    answered by the active model with the probabilities `donto-sheaf infer` computes for the
    same graph and checkpoint (within 1e-6), rows in the request's order, each summing to 1;
  - activation switches the served model without a restart, and a rollback switches it back;
    under concurrent requests (4 threads) while the active model flips 10 times, every answer is
    200 and equals the outputs of the model it names (never a mix, never a dropped request);
  - bad input: no task 400, a task without an active model 404, not JSON 400, a graph with
    other features 400, a graph over --sheaf-max-nodes 400, a node-task graph for an edge task
    400; each with a JSON error;
  - /embed/metrics counts them: donto_sheaf_requests_total, _errors_total, donto_sheaf_infer_rows_total
    and donto_sheaf_model_loads_total move by exactly what the bad input and the latency loop sent.
Prints the served latency of the 100-node request (p50, p99 over 200 sequential requests) for
information; speed is asserted in no test.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

FAILS = []


def check(cond, msg):
    if cond:
        print("ok: " + msg)
    else:
        print("FAIL: " + msg)
        FAILS.append(msg)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-3000:])
        raise SystemExit("sheaf_serve: %s exited %d" % (" ".join(cmd[:3]), p.returncode))
    return p.stdout


def http(port, method, path, token=None, body=None, timeout=30):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                 data=body if body is None or isinstance(body, bytes) else body.encode())
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"raw": raw.decode(errors="replace")}


def metrics(port, token):
    """The unlabelled donto_sheaf_* samples of /embed/metrics."""
    req = urllib.request.Request("http://127.0.0.1:%d/embed/metrics" % port)
    req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(donto_sheaf_[a-z_]+) (\d+)$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def cut(graph, n_keep, task="arg_link"):
    """The first n_keep nodes, the edges among them, the task's pairs among them."""
    nodes = graph["nodes"][:n_keep]
    keep = {x["id"] for x in nodes}
    g = {k: v for k, v in graph.items() if k not in ("nodes", "edges", "tasks")}
    g["nodes"] = [{"id": x["id"], "kind": x.get("kind", "claim"), "features": x["features"]} for x in nodes]
    g["edges"] = [e for e in graph["edges"] if e["src"] in keep and e["dst"] in keep]
    t = next(t for t in graph["tasks"] if t["name"] == task)
    pairs = [p for p in t["pairs"] if p[0] in keep and p[1] in keep]
    g["tasks"] = [{k: v for k, v in t.items() if k not in ("pairs", "splits")}]
    g["tasks"][0]["pairs"] = pairs
    return g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--ref", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref", "sheaf_ref.py"))
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    emb, sh = os.path.join(args.build, "donto-embed"), os.path.join(args.build, "donto-sheaf")
    work = args.work or tempfile.mkdtemp(prefix="sheaf-serve-")
    os.makedirs(work, exist_ok=True)
    db = os.path.join(work, "s.db")
    for f in os.listdir(work):
        if f.startswith("s.db"):
            os.remove(os.path.join(work, f))
    run([emb, "migrate", "--db", db])
    run([sh, "gen-substrate", "--db", db, "--statements", "3000", "--as-of", "2025-06-01", "--until", "2025-09-01",
         "--quiet"])
    gj = os.path.join(work, "g.json")
    run([sh, "export", "--db", db, "--seed", "arguments", "--as-of", "2025-06-01", "--until", "2025-09-01",
         "--model", "planted-16", "--hops", "1", "--max-nodes", "600", "--out", gj, "--quiet"])
    refcmd = "%s %s infer" % (args.python, args.ref)
    ck = {}
    for name, fam in (("arg-a", "diag"), ("arg-b", "gcn")):
        ck[name] = os.path.join(work, name + ".ckpt.json")
        run([sh, "train", "--data", gj, "--task", "arg_link", "--family", fam, "--epochs", "20", "--patience", "20",
             "--hidden", "8", "--layers", "2", "--split", "0", "--quiet", "--checkpoint", ck[name]])
        run([sh, "register", ck[name], "--db", db, "--name", name, "--task", "arg_link", "--reference", refcmd,
             "--migrate"])
    run([sh, "models", "activate", "arg-a", "--db", db])
    toks = {}
    for role in ("contributor", "reader", "analyst", "admin"):
        toks[role] = run([emb, "token", "add", "t-" + role, "--role", role, "--db", db]).strip()

    graph = json.load(open(gj))
    req = cut(graph, 100)
    rj = os.path.join(work, "req.json")
    json.dump(req, open(rj, "w"))
    body = json.dumps(req)
    npairs = len(req["tasks"][0]["pairs"])
    check(npairs >= 5, "the 100-node request graph has %d arg_link pairs" % npairs)
    # What `donto-sheaf infer` says for each model on the same graph.
    want = {}
    for name in ck:
        out = run([sh, "infer", "--checkpoint", ck[name], "--in", rj, "--task", "arg_link", "--allow-other-graph",
                   "--threads", "1"])
        want[name] = [[math.exp(v) for v in json.loads(line)["logp"]] for line in out.splitlines() if line.strip()]

    log = open(os.path.join(work, "serve.log"), "w")
    serve = subprocess.Popen([emb, "serve", "--db", db, "--listen", "127.0.0.1:0", "--threads", "4",
                              "--sheaf-max-nodes", "500"], stderr=subprocess.PIPE, text=True)
    port = None
    for line in serve.stderr:
        log.write(line)
        m = re.search(r"\(port (\d+)\)", line)
        if m:
            port = int(m.group(1))
            break
    if not port:
        serve.kill()
        raise SystemExit("sheaf_serve: serve did not start")
    threading.Thread(target=lambda: [log.write(x) for x in serve.stderr], daemon=True).start()
    try:
        infer = "/sheaf/infer?task=arg_link"
        # roles
        st, j = http(port, "POST", infer, None, body)
        check(st == 401, "no token: %d" % st)
        for role in ("contributor", "reader"):
            st, j = http(port, "POST", infer, toks[role], body)
            check(st == 403 and j.get("error") == "forbidden", "%s on /sheaf/infer: %d %s" % (role, st, j.get("error")))
            st, j = http(port, "GET", "/sheaf/models", toks[role])
            check(st == 403, "%s on /sheaf/models: %d" % (role, st))
        st, j = http(port, "POST", "/embed/lease", toks["analyst"], '{"worker_id": "w", "n": 1, "target": "claim"}')
        check(st == 403, "analyst on /embed/lease: %d" % st)

        def same(rows, name):
            w = want[name]
            if len(rows) != len(w):
                return False
            return all(abs(a - b) <= 1e-6 for r, wr in zip(rows, w) for a, b in zip(r["probs"], wr))

        for role in ("analyst", "admin"):
            st, j = http(port, "POST", infer, toks[role], body)
            check(st == 200 and j["model"]["name"] == "arg-a" and j["kind"] == "edge",
                  "%s: 200 from arg-a (%d %s)" % (role, st, j.get("model") if st == 200 else j))
        rows = j["rows"]
        check(len(rows) == npairs and all(abs(sum(r["probs"]) - 1) < 1e-5 for r in rows),
              "one row per pair (%d), each summing to 1" % len(rows))
        check([r["pair"] for r in rows] == [[p[0], p[1]] for p in req["tasks"][0]["pairs"]], "rows in request order")
        check(same(rows, "arg-a"), "served probabilities equal donto-sheaf infer's (1e-6)")
        check(j["classes"][0] == "none" and rows[0]["class"] in j["classes"], "class names: %s" % j["classes"])
        st, j = http(port, "GET", "/sheaf/models", toks["analyst"])
        check(st == 200 and j["active"][0]["name"] == "arg-a" and j["active"][0]["loaded"], "/sheaf/models: %s" % j)

        # activation and rollback without a restart
        run([sh, "models", "activate", "arg-b", "--db", db])
        st, j = http(port, "POST", infer, toks["analyst"], body)
        check(st == 200 and j["model"]["name"] == "arg-b" and same(j["rows"], "arg-b"), "after activate: arg-b")
        run([sh, "models", "activate", "arg-a", "--db", db])
        st, j = http(port, "POST", infer, toks["analyst"], body)
        check(st == 200 and j["model"]["name"] == "arg-a" and same(j["rows"], "arg-a"), "after rollback: arg-a")

        # concurrent requests while the active model flips
        stop = threading.Event()
        res = {"n": 0, "bad": [], "seen": set()}
        lock = threading.Lock()

        def client():
            while not stop.is_set():
                st, j = http(port, "POST", infer, toks["analyst"], body)
                ok = st == 200 and same(j["rows"], j["model"]["name"])
                with lock:
                    res["n"] += 1
                    if st == 200:
                        res["seen"].add(j["model"]["name"])
                    if not ok:
                        res["bad"].append((st, j.get("error") if isinstance(j, dict) else j))

        th = [threading.Thread(target=client) for _ in range(4)]
        for t in th:
            t.start()
        for i in range(10):
            run([sh, "models", "activate", "arg-b" if i % 2 == 0 else "arg-a", "--db", db])
            time.sleep(0.15)
        stop.set()
        for t in th:
            t.join()
        check(res["n"] > 20 and not res["bad"] and res["seen"] == {"arg-a", "arg-b"},
              "%d concurrent requests across 10 activations: %d bad %s, models seen %s"
              % (res["n"], len(res["bad"]), res["bad"][:3], sorted(res["seen"])))

        # bad input (and the /metrics counters over it and the latency loop below)
        m0 = metrics(port, toks["admin"])
        check(m0.get("donto_sheaf_model_loads_total", 0) >= 3 and m0.get("donto_sheaf_requests_total", 0) >= res["n"],
              "/metrics after the flips: %s" % m0)
        st, j = http(port, "POST", "/sheaf/infer", toks["analyst"], body)
        check(st == 400 and "task" in j.get("message", ""), "no task: %d %s" % (st, j))
        st, j = http(port, "POST", "/sheaf/infer?task=identity", toks["analyst"], body)
        check(st == 404 and j.get("error") == "no_active_model", "no active model: %d %s" % (st, j.get("error")))
        st, j = http(port, "POST", infer, toks["analyst"], "{not json")
        check(st == 400 and j.get("error") == "bad_graph", "not JSON: %d %s" % (st, j.get("error")))
        other = json.loads(body)
        for x in other["nodes"]:
            x["features"] = x["features"] + [0.0]
        other["feature_dim"] = len(other["nodes"][0]["features"])
        st, j = http(port, "POST", infer, toks["analyst"], json.dumps(other))
        check(st == 400 and "features" in j.get("message", ""), "other feature dim: %d %s" % (st, j.get("message")))
        big = cut(graph, 600)
        st, j = http(port, "POST", infer, toks["analyst"], json.dumps(big))
        check(st == 400 and j.get("error") == "graph_too_large", "over --sheaf-max-nodes: %d %s" % (st, j.get("error")))
        node_only = {k: v for k, v in req.items() if k != "tasks"}
        st, j = http(port, "POST", infer, toks["analyst"], json.dumps(node_only))
        check(st == 400 and j.get("error") == "bad_graph", "no pairs for an edge task: %d %s" % (st, j.get("message")))

        # latency, for information
        lat = []
        for _ in range(200):
            t0 = time.perf_counter()
            st, j = http(port, "POST", infer, toks["analyst"], body)
            lat.append((time.perf_counter() - t0) * 1e3)
        m1 = metrics(port, toks["admin"])
        d = {k: m1.get(k, -1) - m0.get(k, 0) for k in m1}
        want_d = {"donto_sheaf_requests_total": 206, "donto_sheaf_errors_total": 6,
                  "donto_sheaf_infer_rows_total": 200 * npairs, "donto_sheaf_model_loads_total": 0}
        check(d == want_d, "/metrics counted 6 refusals and 200 answers of %d rows: %s, want %s" % (npairs, d, want_d))
        lat.sort()
        print("sheaf_serve: 100-node request (%d pairs): p50 %.2f ms, p99 %.2f ms over 200 requests"
              % (npairs, lat[100], lat[197]))
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print("sheaf_serve: %d failure(s)" % len(FAILS))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
