#!/usr/bin/env python3
"""The admin page (GET /embed/admin) in headless Chromium against a live
coordinator (`donto-embed serve` on 127.0.0.1, a free port, a temp SQLite db).

Seeds the queue (Python sqlite3 against the migrated schema), leases and
submits as two workers (one submit rejected), files a report whose message is
HTML, then drives the page: a contributor token is refused with an error on
the page, the admin token logs in, and after a refresh every figure on the
page must equal /embed/stats fetched with the same token; the report text
must show literally (no element, no script run). With --model (the
coordinator then verifies submitted vectors), a third token submits a wrong
vector for an item of that model and is suspended, and a fourth is revoked:
the tokens table (state, streak, checks, failed, withdrawn, the reason as
text) and the verifier's counters must equal /embed/stats too; without it,
the verification section stays hidden. /embed/metrics is checked against the
same figures (label escaping included). Screenshot: OUT_DIR/admin.png.
Bounded in time; the server is stopped with SIGTERM.

Uses Debian's chromium (/usr/bin/chromium) through PyPI playwright; no
browser is downloaded.
"""
import argparse
import json
import math
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

MODEL = "BAAI/bge-small-en-v1.5"
VMODEL = "sentence-transformers/all-MiniLM-L6-v2"  # what --model DIR embeds
W3 = "<i>m</i>"              # a worker of the token that is suspended
XSS = '<img src=x onerror=alert(1)><script>alert(2)</script> & "quotes"'
W1 = 'gpu "7"\\lab'          # quote and backslash: escaped in /metrics labels
W2 = "<b>w2</b>"


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def http(base, method, path, token=None, body=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unit(seed):
    v = [math.sin(seed * 7.1 + i * 0.37) + 1.5 for i in range(384)]
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def parse_metrics(text):
    """{(name, frozenset(labels)): value} for every sample line."""
    out = {}
    lab = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^(\w+)(\{.*\})? (\S+)$", line)
        check(m, "metrics: bad line %r" % line)
        labels = {}
        if m.group(2):
            for k, v in lab.findall(m.group(2)):
                labels[k] = v.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(3))
    return out


def seed_and_work(base, db, tok_w):
    con = sqlite3.connect(db)
    rows = [(0, "claim-%d" % i, MODEL, "claim text %d" % i) for i in range(6)]
    rows += [(2, "entity-%d" % i, MODEL, "entity %d" % i) for i in range(3)]
    rows += [(1, "pred-0", MODEL, "predicate 0")]
    con.executemany("INSERT INTO queue (target, item_id, model, text) VALUES (?, ?, ?, ?)", rows)
    con.commit()
    con.close()

    st, b, _ = http(base, "POST", "/lease", tok_w, {"worker_id": W1, "n": 4, "target": "claim"})
    check(st == 200, "lease w1: %d %s" % (st, b))
    batch = json.loads(b)["batch"]
    check(len(batch) == 4, "lease w1 got %d items" % len(batch))
    items = [{"target": it["target"], "item_id": it["item_id"], "lease_id": it["lease_id"], "model": MODEL,
              "vector": unit(k)} for k, it in enumerate(batch[:3])]
    # Rejected by the store (counted against the worker): never leased to it.
    items.append({"target": "predicate", "item_id": "pred-0", "vector": unit(50)})
    st, b, _ = http(base, "POST", "/submit", tok_w, {"worker_id": W1, "items": items})
    check(st == 200 and json.loads(b)["upserted"] == 3 and len(json.loads(b)["rejected"]) == 1,
          "submit w1: %d %s" % (st, b))

    st, b, _ = http(base, "POST", "/lease", tok_w, {"worker_id": W2, "n": 2, "target": "entity"})
    batch = json.loads(b)["batch"]
    check(st == 200 and len(batch) == 2, "lease w2: %d %s" % (st, b))
    st, b, _ = http(base, "POST", "/submit", tok_w, {"worker_id": W2, "items": [
        {"target": batch[0]["target"], "item_id": batch[0]["item_id"], "model": MODEL, "vector": unit(99)}]})
    check(st == 200 and json.loads(b)["upserted"] == 1, "submit w2: %d %s" % (st, b))

    st, b, _ = http(base, "POST", "/report", tok_w, {"worker_id": W2, "kind": "oom", "message": XSS})
    check(st == 200, "report: %d %s" % (st, b))


def suspend_one(base, db, tok_a, tok_m):
    """A vector that is not the item's embedding, for an item of the
    verifier's model: the verifier fails it and suspends the token."""
    con = sqlite3.connect(db)
    con.execute("INSERT INTO queue (target, item_id, model, text) VALUES (3, 'mal-0', ?, 'the cat sat on the mat')",
                (VMODEL,))
    con.commit()
    con.close()
    st, b, _ = http(base, "POST", "/lease", tok_m, {"worker_id": W3, "n": 1, "target": "memory_chunk"})
    batch = json.loads(b)["batch"] if st == 200 else []
    check(len(batch) == 1, "lease mallory: %d %s" % (st, b))
    st, b, _ = http(base, "POST", "/submit", tok_m, {"worker_id": W3, "items": [
        {"target": "memory_chunk", "item_id": "mal-0", "lease_id": batch[0]["lease_id"], "model": VMODEL,
         "vector": unit(3)}]})
    check(st == 200 and json.loads(b)["upserted"] == 1, "submit mallory: %d %s" % (st, b))
    deadline = time.monotonic() + 60
    while True:
        st, b, _ = http(base, "GET", "/stats", tok_a)
        d = json.loads(b) if st == 200 else {}
        toks = {t["name"]: t for t in d.get("tokens", [])}
        if d.get("verify", {}).get("failed") == 1 and toks.get("mallory", {}).get("suspended"):
            return
        check(time.monotonic() < deadline, "mallory not suspended within 60 s: %s" % b)
        time.sleep(0.2)


def check_metrics(base, tok_a, tok_w, stats):
    st, b, _ = http(base, "GET", "/metrics", tok_w)
    check(st == 403, "metrics with a contributor token: %d" % st)
    st, text, hdr = http(base, "GET", "/metrics", tok_a)
    check(st == 200, "metrics: %d %s" % (st, text))
    check(hdr.get("Content-Type", "").startswith("text/plain; version=0.0.4"), "metrics content type")
    m = parse_metrics(text)
    for t in ("claim", "predicate", "entity", "memory_chunk"):
        for k in ("embedded", "pending", "leased"):
            key = ("donto_embed_items", frozenset({"target": t, "state": k}.items()))
            check(m.get(key) == stats[t][k], "metrics %s %s: %s != %s" % (t, k, m.get(key), stats[t][k]))
        key = ("donto_embed_target_items", frozenset({"target": t}.items()))
        check(m.get(key) == stats[t]["total"], "metrics %s total" % t)
    check(m.get(("donto_embed_items_per_minute", frozenset())) == stats["items_per_minute"], "metrics per minute")
    for c in stats["contributors"]:
        lab = frozenset({"worker_id": c["worker_id"]}.items())
        check(m.get(("donto_embed_contributor_vectors_total", lab)) == c["total"], "metrics total of %r" % c["worker_id"])
        check(m.get(("donto_embed_contributor_rejected_total", lab)) == c["rejected"], "metrics rejected of %r" % c["worker_id"])
    check('worker_id="alice/gpu \\"7\\"\\\\lab"' in text, "metrics: worker_id label not escaped as expected")
    check(m.get(("donto_embed_http_responses_total", frozenset({"route": "metrics", "code": "403"}.items()))) == 1,
          "metrics: request counter for the 403")
    submits = 3 if "verify" in stats else 2
    check(m.get(("donto_embed_http_responses_total", frozenset({"route": "submit", "code": "200"}.items()))) == submits,
          "metrics: request counter for submits")
    # The connection guard's section (conn_guard_metrics): this request's
    # connection is open and was admitted, the limit is the default's.
    check((m.get(("donto_embed_connections_open", frozenset())) or 0) >= 1, "metrics: connections open")
    check((m.get(("donto_embed_connections_accepted_total", frozenset())) or 0) >= 2, "metrics: connections accepted")
    check((m.get(("donto_embed_connections_max", frozenset())) or 0) > 0, "metrics: connection limit")
    check(("donto_embed_connections_timed_out_total", frozenset({"phase": "body"}.items())) in m,
          "metrics: timed-out counter by phase")


def check_page(url, base, tok_a, tok_w, out_dir, timeout_ms):
    from playwright.sync_api import sync_playwright
    dialogs, console_errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ.get("DONTO_CHROMIUM", "/usr/bin/chromium"),
                                    headless=True, timeout=timeout_ms,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_default_timeout(timeout_ms)
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            resp = page.goto(url)
            check(resp and resp.status == 200, "GET /embed/admin without a token")

            # A contributor token is refused, and the page says so.
            page.fill("#token", tok_w)
            page.click("#login-button")
            page.wait_for_selector('#error[data-status="403"]')
            check(page.text_content("#error").strip() != "", "no error text for a contributor token")
            check(page.is_hidden("#dash"), "dashboard shown to a contributor token")

            # The admin token logs in; wait for a second refresh.
            page.fill("#token", tok_a)
            page.click("#login-button")
            # (A CSS wait: the page's CSP forbids the string eval behind wait_for_function.)
            page.wait_for_selector('#status:not([data-refreshes="0"]):not([data-refreshes="1"])', state="attached")
            st, b, _ = http(base, "GET", "/stats", tok_a)
            check(st == 200, "stats: %d" % st)
            stats = json.loads(b)
            # Figures move only by our own actions; read them after this fetch.
            for t in ("claim", "predicate", "entity", "memory_chunk"):
                for k in ("embedded", "pending", "leased", "total"):
                    v = page.get_attribute("#t-%s-%s" % (t, k), "data-value")
                    check(v is not None and int(v) == stats[t][k], "page %s %s = %s, stats %s" % (t, k, v, stats[t][k]))
                    txt = page.text_content("#t-%s-%s" % (t, k)).replace(",", "")
                    check(int(txt) == stats[t][k], "page %s %s text %r" % (t, k, txt))
            ipm = page.get_attribute("#items-per-minute", "data-value")
            check(int(ipm) == stats["items_per_minute"], "page items/min %s, stats %s" % (ipm, stats["items_per_minute"]))
            # The chart draws the server's per-minute series of the last hour.
            pm = stats.get("per_minute")
            check(isinstance(pm, list) and len(pm) == 60, "stats per_minute: %r" % (pm,))
            check(int(page.get_attribute("#throughput-chart", "data-samples")) == len(pm), "chart samples != series length")
            check(int(page.get_attribute("#throughput-chart", "data-sum")) == sum(p["items"] for p in pm),
                  "chart sum %s != series sum" % page.get_attribute("#throughput-chart", "data-sum"))
            verifying = "verify" in stats
            accepted = 5 if verifying else 4  # mallory's vector was accepted, then withdrawn
            check(sum(p["items"] for p in pm) == accepted,
                  "series holds %d accepted vectors, want %d" % (sum(p["items"] for p in pm), accepted))

            rows = page.eval_on_selector_all(
                "#contributors tbody tr",
                """rs => rs.map(r => ({w: r.getAttribute('data-worker-id'),
                        name: r.querySelector('[data-field=worker_id]').textContent,
                        total: Number(r.querySelector('[data-field=total]').getAttribute('data-value')),
                        rejected: Number(r.querySelector('[data-field=rejected]').getAttribute('data-value')),
                        rate: Number(r.querySelector('[data-field=items_per_minute]').getAttribute('data-value')),
                        seen: Number(r.querySelector('[data-field=last_seen]').getAttribute('data-value'))}))""")
            want = {c["worker_id"]: c for c in stats["contributors"]}
            check(len(rows) == len(want) and len(want) == (3 if verifying else 2),
                  "contributors: page %d rows, stats %d" % (len(rows), len(want)))
            for r in rows:
                c = want.get(r["w"])
                check(c is not None, "page shows unknown contributor %r" % r["w"])
                check(r["name"] == r["w"], "contributor name shown as %r" % r["name"])
                check(r["total"] == c["total"] and r["rejected"] == c["rejected"] and r["seen"] == c["last_seen_ms"],
                      "contributor %r: page %r, stats %r" % (r["w"], r, c))
                # The rate is count / elapsed span, so it drifts down between the
                # page's last refresh and this fetch (a few s of a 5-6 min span).
                check(c["items_per_minute"] > 0 and abs(r["rate"] - c["items_per_minute"]) <= 0.02 * c["items_per_minute"],
                      "contributor %r items/min: page %r, stats %r" % (r["w"], r["rate"], c["items_per_minute"]))
            # A worker is "<token name>/<worker id>" (docs/trust.md, Identity).
            check(want["alice/" + W1]["total"] == 3 and want["alice/" + W1]["rejected"] == 1 and
                  want["alice/" + W2]["total"] == 1, "stats contributors: %r" % stats["contributors"])

            msgs = page.eval_on_selector_all("#reports tbody [data-field=message]", "es => es.map(e => e.textContent)")
            # With a verifier, the suspension's report(s) too (a second sweep a little later).
            check(XSS in msgs and (any(W3 in m for m in msgs) if verifying else len(msgs) == 1),
                  "reports shown as %r" % msgs)
            check(page.eval_on_selector_all("#reports img, #reports script, #contributors b, #tokens i, #reports i",
                                            "es => es.length") == 0,
                  "worker text was rendered as HTML")

            # Tokens and their trust record, as /stats has them.
            trows = page.eval_on_selector_all(
                "#tokens tbody tr",
                """rs => rs.map(r => { const o = {key: r.getAttribute('data-token')};
                        r.querySelectorAll('[data-field]').forEach(c => {
                          o[c.getAttribute('data-field')] = c.textContent;
                          if (c.hasAttribute('data-value')) o[c.getAttribute('data-field') + '_v'] = c.getAttribute('data-value'); });
                        return o; })""")
            toks = {t["name"]: t for t in stats["tokens"]}
            check(len(trows) == len(toks) == (4 if verifying else 2), "tokens: page %d rows, stats %d" % (len(trows), len(toks)))
            check(page.is_visible("#tokens-section"), "tokens section hidden")
            for r in trows:
                t = toks.get(r["key"])
                check(t is not None and r["name"] == t["name"] and r["role"] == t["role"], "token row %r, stats %r" % (r, t))
                state = "revoked" if t["revoked"] else "suspended" if t["suspended"] else "active"
                check(r["state"] == state and r["state_v"] == state, "token %s state %r, want %s" % (t["name"], r["state"], state))
                for k in ("streak", "checks", "failed", "withdrawn"):
                    check(int(r[k + "_v"]) == t[k] and int(r[k].replace(",", "")) == t[k],
                          "token %s %s: page %r, stats %r" % (t["name"], k, r[k], t[k]))
                check(r["reason"] == (t.get("reason", "") if t["suspended"] else ""),
                      "token %s reason %r, stats %r" % (t["name"], r["reason"], t.get("reason")))
            if verifying:
                m = toks["mallory"]
                # (The reason names the item and the worker, W3, until the second
                # sweep a few seconds later replaces it: only non-empty here.)
                check(m["suspended"] and m["failed"] == 1 and m["checks"] == 1 and m["withdrawn"] == 1 and m["reason"],
                      "mallory in stats: %r" % m)
                check(toks["old"]["revoked"] and toks["alice"]["checks"] == 0, "stats tokens: %r" % stats["tokens"])
                check(page.is_visible("#verify-section"), "verification section hidden")
                v = stats["verify"]
                for k, sk in (("queued", "queued"), ("checked", "checked"), ("passed", "passed"), ("failed", "failed"),
                              ("skipped", "skipped_queue_full")):
                    pv = page.get_attribute("#verify-" + k, "data-value")
                    check(pv is not None and int(pv) == v[sk], "verify %s: page %r, stats %r" % (k, pv, v[sk]))
                check(v["checked"] == 1 and v["failed"] == 1, "stats verify: %r" % v)
            else:
                check(page.is_hidden("#verify-section"), "verification section shown without a verifier")
            check(page.text_content("#contributors").find(W2) >= 0, "worker id with markup not shown literally")
            check(not dialogs, "a dialog opened: %r" % dialogs)
            # The contributor token's 403 is logged by the browser; anything
            # else (a CSP violation, a script error, a missing resource) fails.
            errs = [m for m in console_errors if "status of 403" not in m]
            check(not errs, "console errors: %r" % errs)

            os.makedirs(out_dir, exist_ok=True)
            shot = os.path.join(out_dir, "admin.png")
            page.screenshot(path=shot, full_page=True)
            print("screenshot: " + shot, flush=True)
            return stats
        finally:
            browser.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="donto-embed")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--timeout", type=float, default=150, help="whole test, seconds")
    ap.add_argument("--model", help="serve --model DIR: verify submitted vectors (tokens, verification)")
    a = ap.parse_args()
    signal.signal(signal.SIGALRM, lambda *_: fail("timed out after %.0f s" % a.timeout))
    signal.alarm(int(a.timeout))

    tmp = tempfile.TemporaryDirectory(prefix="donto-admin-")
    db = os.path.join(tmp.name, "coord.db")
    run = lambda *args: subprocess.run([a.bin, *args], check=True, capture_output=True, text=True, timeout=30)
    run("migrate", "--db", db)
    tok_a = run("token", "add", "ops", "--role", "admin", "--db", db).stdout.strip()
    tok_w = run("token", "add", "alice", "--db", db).stdout.strip()
    check(re.fullmatch(r"[0-9a-f]{64}", tok_a) and re.fullmatch(r"[0-9a-f]{64}", tok_w), "token add output")
    tok_m = None
    if a.model:
        tok_m = run("token", "add", "mallory", "--db", db).stdout.strip()
        run("token", "add", "old", "--db", db)
        run("token", "revoke", "old", "--db", db)

    port = free_port()
    base = "http://127.0.0.1:%d/embed" % port
    log = open(os.path.join(tmp.name, "serve.log"), "w+")
    srv = subprocess.Popen([a.bin, "serve", "--db", db, "--listen", "127.0.0.1:%d" % port, "--threads", "2",
                            "--drain", "5"] + (["--model", a.model] if a.model else []),
                           stdout=log, stderr=subprocess.STDOUT)
    ok = False
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if http(base, "GET", "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            check(srv.poll() is None, "serve exited early")
            check(time.monotonic() < deadline, "serve did not answer /health within 20 s")
            time.sleep(0.1)
        st, page, hdr = http(base, "GET", "/admin")
        check(st == 200 and hdr.get("Content-Type", "").startswith("text/html"), "GET /admin: %d" % st)
        check("http://" not in page and "https://" not in page, "the page refers to something outside")
        seed_and_work(base, db, tok_w)
        if a.model:
            suspend_one(base, db, tok_a, tok_m)
        stats = check_page(base + "/admin", base, tok_a, tok_w, a.out_dir, 30000)
        check_metrics(base, tok_a, tok_w, stats)
        ok = True
    finally:
        if srv.poll() is None:
            srv.send_signal(signal.SIGTERM)
            try:
                rc = srv.wait(timeout=15)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait(timeout=5)
                fail("serve did not stop within 15 s of SIGTERM")
            if ok:
                check(rc == 0, "serve exited with %d after SIGTERM" % rc)
        if not ok:
            log.seek(0)
            sys.stdout.write("--- serve log ---\n" + log.read()[-4000:])
        log.close()
    print("admin page: ok", flush=True)


if __name__ == "__main__":
    main()
