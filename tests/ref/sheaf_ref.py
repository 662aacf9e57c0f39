#!/usr/bin/env python3
"""PyTorch reference of donto's Neural Sheaf Diffusion models (Diag, O(d) Householder /
Cayley, General), the GCN and MLP baselines, and the edge decoder with its class-weighted NLL
(issue 17), written from the model's equations (docs/sheaf.md) with torch autograd. It is the
parity gate for src/sheaf/, not product code. Parity also checks the C metrics (accuracy,
macro-F1, ROC-AUC, average precision) against sklearn's on the C log-probabilities.

  parity:  python sheaf_ref.py parity --bin build/tests/sheaf_dump --family diag --graph random ...
           runs the C dump helper, loads its weights (checkpoint JSON) and graph, and compares
           log-probabilities (max abs diff) and every parameter gradient (max abs diff relative
           to the tensor's largest gradient) against this reference.
  infer:   python sheaf_ref.py infer --checkpoint CK --graph G.json --out logp.json: float64
           log-probabilities of a checkpoint on an export-format graph (donto-sheaf register's
           parity gate runs this).
  probe:   python sheaf_ref.py probe --checkpoint CK --out CK2: a copy of CK with a "probe" member
           (a small graph and this reference's outputs; docs/sheaf.md "Probe").
  bench:   python sheaf_ref.py bench --graph chameleon|random:N:M ... times one training epoch
           (forward + backward + Adam step) of this reference (used by bench/sheaf-vs-torch).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F


def index_add(out, idx, src):
    """out + scatter of src rows at idx. torch 1.13's index_add on CPU loops over the index in
    Python-level tensor ops for >1-D tensors (seconds per call on chameleon); index_put_ with
    accumulate is vectorised."""
    return out.index_put((idx,), src, accumulate=True)


class SheafModel(torch.nn.Module):
    """Parameters are named like the C checkpoint's tensors; shapes [rows, cols]."""

    def __init__(self, hp, n, f, K, eu, ev, dtype=torch.float64):
        super().__init__()
        self.hp, self.n, self.f, self.K = hp, n, f, K
        self.family = hp["family"]
        self.L = hp["layers"]
        self.C = hp["hidden"]
        self.d = hp["d"]
        self.dp = self.d + int(hp["add_lp"]) + int(hp["add_hp"])
        self.H = self.dp * self.C
        d = self.d
        self.P = {"diag": d, "orth": d * (d - 1) // 2, "general": d * d}.get(self.family, 0)
        self.eu, self.ev = eu, ev
        # directed edges: 2k = eu->ev, 2k+1 = ev->eu
        self.row = torch.stack([eu, ev], 1).reshape(-1)
        self.col = torch.stack([ev, eu], 1).reshape(-1)
        deg = torch.bincount(torch.cat([eu, ev]), minlength=n).to(dtype)
        self.deg = deg
        self.fix_diag = deg / (deg + 1)
        self.fix_off = 1.0 / torch.sqrt((deg[eu] + 1) * (deg[ev] + 1))
        self.dtype = dtype
        self.params = torch.nn.ParameterDict()

    def add(self, name, rows, cols):
        self.params[name.replace(".", "_")] = torch.nn.Parameter(torch.zeros(rows, cols, dtype=self.dtype))

    def p(self, name):
        return self.params[name.replace(".", "_")]

    # ---- GCN ------------------------------------------------------------
    def gcn_aggregate(self, T):
        out = T / (self.deg + 1).unsqueeze(1)
        w = self.fix_off.unsqueeze(1)
        out = index_add(out, self.eu, w * T[self.ev])
        out = index_add(out, self.ev, w * T[self.eu])
        return out

    def forward_gcn(self, x, training=False):
        h = F.dropout(x, self.hp["input_dropout"], training)
        for l in range(self.L):
            h = self.gcn_aggregate(h @ self.p(f"gcn.{l}.weight").T) + self.p(f"gcn.{l}.bias").reshape(-1)
            if l < self.L - 1:
                h = F.dropout(torch.relu(h), self.hp["dropout"], training)
        return h

    # ---- MLP: the node features alone -------------------------------------
    def forward_mlp(self, x, training=False):
        h = F.dropout(x, self.hp["input_dropout"], training)
        for l in range(self.L):
            h = h @ self.p(f"mlp.{l}.weight").T + self.p(f"mlp.{l}.bias").reshape(-1)
            if l < self.L - 1:
                h = F.dropout(torch.relu(h), self.hp["dropout"], training)
        return h

    # ---- the edge decoder (docs/sheaf.md "Edge tasks") --------------------------------
    def decode(self, h, pu, pv, directed):
        """h [N, K] node representations -> pair logits [P, classes]:
        z = [h_u * h_v, |h_u - h_v|] (directed: + [h_u, h_v]) -> Linear -> ReLU -> Linear."""
        hu, hv = h[pu], h[pv]
        parts = [hu * hv, (hu - hv).abs()]
        if directed:
            parts += [hu, hv]
        z = torch.cat(parts, 1)
        a = torch.relu(z @ self.p("dec.0.weight").T + self.p("dec.0.bias").reshape(-1))
        return a @ self.p("dec.1.weight").T + self.p("dec.1.bias").reshape(-1)

    # ---- sheaf Laplacian blocks (dense d' x d' per node / per undirected edge) ----------
    def orth_maps(self, maps):
        d, E2 = self.d, maps.shape[0]
        A = torch.zeros(E2, d, d, dtype=maps.dtype)
        if d > 1:
            ti = torch.tril_indices(d, d, -1)
            A[:, ti[0], ti[1]] = maps
        if self.hp["orth"] == "cayley":
            A = A - A.transpose(1, 2)
            I = torch.eye(d, dtype=maps.dtype).expand(E2, d, d)
            return torch.linalg.solve(I - 0.5 * A, I + 0.5 * A)
        if d == 1:
            return torch.ones(E2, 1, 1, dtype=maps.dtype)
        # d-1 reflections: column j holds v_j below the (implied unit) diagonal; the last
        # column gets tau = 0 so the product is the full d x d matrix
        tau = 2.0 / (1.0 + (A[:, :, : d - 1] ** 2).sum(1))
        tau = torch.cat([tau, torch.zeros(E2, 1, dtype=maps.dtype)], 1)
        return torch.linalg.householder_product(A, tau)

    def laplacian(self, maps, xm, t):
        n, d, dp, ne = self.n, self.d, self.dp, self.eu.shape[0]
        eu, ev, row = self.eu, self.ev, self.row
        Ld = torch.zeros(n, dp, dp, dtype=maps.dtype)
        Lo = torch.zeros(ne, dp, dp, dtype=maps.dtype)
        if self.family == "diag":
            D = index_add(torch.zeros(n, d, dtype=maps.dtype), row, maps * maps)
            s = (D + 1).pow(-0.5)
            ld = D * s * s
            lo = -s[eu] * maps[0::2] * maps[1::2] * s[ev]
            Ld[:, :d, :d] = torch.diag_embed(ld)
            Lo[:, :d, :d] = torch.diag_embed(lo)
        elif self.family == "orth":
            Q = self.orth_maps(maps)
            if self.hp["edge_weights"]:
                a = self.p(f"weight_learner.{t}.weight").reshape(-1)
                H = xm.shape[1]
                sw = torch.sigmoid((xm @ a[:H])[self.row] + (xm @ a[H:])[self.col])
                w = sw[0::2] * sw[1::2]
            else:
                w = torch.ones(ne, dtype=maps.dtype)
            D = index_add(index_add(torch.zeros(n, dtype=maps.dtype), eu, w * w), ev, w * w)
            s = (D + 1).pow(-0.5)
            I = torch.eye(d, dtype=maps.dtype)
            Ld[:, :d, :d] = (D * s * s).reshape(n, 1, 1) * I
            c = -(s[eu] * s[ev] * w * w).reshape(ne, 1, 1)
            Lo[:, :d, :d] = c * (Q[0::2].transpose(1, 2) @ Q[1::2])
        else:  # general
            Fm = maps.reshape(-1, d, d)
            FtF = Fm.transpose(1, 2) @ Fm
            D = index_add(torch.zeros(n, d, d, dtype=maps.dtype), row, FtF)
            M = D + (1.0 + self.hp["gen_eps"]) * torch.eye(d, dtype=maps.dtype)
            evals, V = torch.linalg.eigh(M)
            S = (V * evals.pow(-0.5).unsqueeze(1)) @ V.transpose(1, 2)
            Ld[:, :d, :d] = S @ D @ S
            Lo[:, :d, :d] = -S[eu] @ (Fm[0::2].transpose(1, 2) @ Fm[1::2]) @ S[ev]
        j = d
        # The reference code's fixed dims: add_lp is D + A, add_hp is D - A (normalised; the
        # names are the reference's, whose parser help calls add_lp the high-pass filter).
        if self.hp["add_lp"]:
            Ld[:, j, j] = self.fix_diag
            Lo[:, j, j] = self.fix_off
            j += 1
        if self.hp["add_hp"]:
            Ld[:, j, j] = self.fix_diag
            Lo[:, j, j] = -self.fix_off
        return Ld, Lo

    def sparse_apply(self, Ld, Lo, Y):
        """Z = L Y with L as one torch sparse (N d') x (N d') matrix, as the NSD reference code
        does with torch_sparse.spmm (used by the speed benchmark; parity uses the block path)."""
        n, dp, C = self.n, self.dp, self.C
        if not hasattr(self, "_lap_idx"):
            ar = torch.arange(dp)
            if self.family == "diag":
                ii, jj = ar, ar
            else:
                ii, jj = ar.repeat_interleave(dp), ar.repeat(dp)
            nodes = torch.arange(n)
            r_d = (nodes.unsqueeze(1) * dp + ii).reshape(-1)
            c_d = (nodes.unsqueeze(1) * dp + jj).reshape(-1)
            r_uv = (self.eu.unsqueeze(1) * dp + ii).reshape(-1)
            c_uv = (self.ev.unsqueeze(1) * dp + jj).reshape(-1)
            r_vu = (self.ev.unsqueeze(1) * dp + jj).reshape(-1)
            c_vu = (self.eu.unsqueeze(1) * dp + ii).reshape(-1)
            self._lap_idx = torch.stack([torch.cat([r_d, r_uv, r_vu]), torch.cat([c_d, c_uv, c_vu])])
            self._lap_sel = (ii, jj)
        ii, jj = self._lap_sel
        vals = torch.cat([Ld[:, ii, jj].reshape(-1), Lo[:, ii, jj].reshape(-1), Lo[:, ii, jj].reshape(-1)])
        L = torch.sparse_coo_tensor(self._lap_idx, vals, (n * dp, n * dp))
        return torch.sparse.mm(L, Y.reshape(n * dp, C)).reshape(n, dp, C)

    def forward(self, x, training=False):
        return F.log_softmax(self.node_out(x, training), dim=1)

    def node_out(self, x, training=False):
        """the encoder's output [N, K]: node-task logits, or an edge task's node representations"""
        if self.family == "gcn":
            return self.forward_gcn(x, training)
        if self.family == "mlp":
            return self.forward_mlp(x, training)
        n, dp, C, H = self.n, self.dp, self.C, self.H
        p_drop = self.hp["dropout"]
        h = F.dropout(x, self.hp["input_dropout"], training)
        h = h @ self.p("lin1.weight").T + self.p("lin1.bias").reshape(-1)
        h = F.dropout(F.elu(h), p_drop, training)
        if self.hp["second_linear"]:
            h = h @ self.p("lin12.weight").T + self.p("lin12.bias").reshape(-1)
        X = h.reshape(n, dp, C)
        for t in range(self.L):
            xm = X.reshape(n, H)
            if t > 0:
                xm = F.dropout(xm, p_drop, training)
            W = self.p(f"sheaf_learner.{t}.weight")
            # W [x_u || x_v] = W_l x_u + W_r x_v: project nodes first, then gather (never E x 2H)
            maps = torch.tanh((xm @ W[:, :H].T)[self.row] + (xm @ W[:, H:].T)[self.col])
            Ld, Lo = self.laplacian(maps, xm, t)
            Y = F.dropout(X, p_drop, training)
            if self.hp["left_weights"]:
                Y = torch.einsum("ij,njc->nic", self.p(f"left.{t}.weight"), Y)
            if self.hp["right_weights"]:
                Y = Y @ self.p(f"right.{t}.weight").T
            if getattr(self, "sparse_lap", False):
                Z = self.sparse_apply(Ld, Lo, Y)
            elif self.family == "diag":
                # diagonal blocks: elementwise, as the reference code does for Diag-NSD
                ld = torch.diagonal(Ld, dim1=1, dim2=2).unsqueeze(2)
                lo = torch.diagonal(Lo, dim1=1, dim2=2).unsqueeze(2)
                Z = ld * Y
                Z = index_add(Z, self.eu, lo * Y[self.ev])
                Z = index_add(Z, self.ev, lo * Y[self.eu])
            else:
                Z = Ld @ Y
                Z = index_add(Z, self.eu, Lo @ Y[self.ev])
                Z = index_add(Z, self.ev, Lo.transpose(1, 2) @ Y[self.eu])
            coef = (1 + torch.tanh(self.p(f"epsilons.{t}").reshape(-1))).reshape(1, dp, 1)
            X = coef * X - F.elu(Z)
        return X.reshape(n, H) @ self.p("lin2.weight").T + self.p("lin2.bias").reshape(-1)


def model_from_ckpt(ck, n, f, K, eu, ev, dtype):
    hp = ck["hparams"]
    m = SheafModel(hp, n, f, K, eu, ev, dtype)
    for t in ck["tensors"]:
        m.add(t["name"], t["rows"], t["cols"])
        with torch.no_grad():
            m.p(t["name"]).copy_(torch.tensor(np.array(t["data"], dtype=np.float32).reshape(t["rows"], t["cols"])))
    return m


def cmd_parity(a):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [a.bin, "--out", tmp, "--graph", a.graph, "--family", a.family] + a.extra
        if a.data_dir:
            cmd += ["--data-dir", a.data_dir]
        subprocess.run(cmd, check=True)
        meta = json.load(open(os.path.join(tmp, "meta.json")))
        ck = json.load(open(os.path.join(tmp, "ckpt.json")))
        n, f, K, ne = meta["n"], meta["f"], meta["K"], meta["ne"]
        rd = lambda name, dt: np.fromfile(os.path.join(tmp, name), dtype=dt)
        x = torch.tensor(rd("x.f32", np.float32).reshape(n, f))
        y = torch.tensor(rd("y.i32", np.int32).astype(np.int64))
        eu = torch.tensor(rd("eu.i32", np.int32).astype(np.int64))
        ev = torch.tensor(rd("ev.i32", np.int32).astype(np.int64))
        mask = torch.tensor(rd("mask.u8", np.uint8).astype(bool))
        edge = meta.get("edge", False)
        nex = meta["P"] if edge else n  # examples: pairs of an edge task, or nodes
        logp_c = rd("logp.f32", np.float32).reshape(nex, K)
        grads_c = rd("grads.f32", np.float32)
        if edge:
            pu = torch.tensor(rd("pu.i32", np.int32).astype(np.int64))
            pv = torch.tensor(rd("pv.i32", np.int32).astype(np.int64))
            cw_c = rd("cw.f32", np.float32)
    dtype = torch.float64
    ok = True
    if edge:
        # class weights: w_c = n / (K n_c) over the train pairs (0 for an absent class)
        cnt = np.bincount(y[mask].numpy(), minlength=K).astype(np.float64)
        cw = np.where(cnt > 0, cnt.sum() / (K * np.maximum(cnt, 1)), 0.0)
        cw_diff = np.abs(cw - cw_c).max()
        ok &= cw_diff <= 1e-6
        print(f"  class weights C {np.round(cw_c, 6).tolist()} ref {np.round(cw, 6).tolist()} "
              f"{'ok' if cw_diff <= 1e-6 else 'FAIL'}")
        m = model_from_ckpt(ck, n, f, ck["hparams"]["hidden"], eu, ev, dtype)
        h = m.node_out(x.to(dtype), training=False)
        logp = F.log_softmax(m.decode(h, pu, pv, meta["directed"]), dim=1)
        # torch's weighted mean: sum_i w[y_i] nll_i / sum_i w[y_i], as sheaf_weighted_nll
        loss = F.nll_loss(logp[mask], y[mask], weight=torch.tensor(cw, dtype=dtype))
    else:
        m = model_from_ckpt(ck, n, f, K, eu, ev, dtype)
        logp = m(x.to(dtype), training=False)
        loss = F.nll_loss(logp[mask], y[mask])
    loss.backward()
    dlogp = np.abs(logp.detach().numpy() - logp_c).max()
    ok &= dlogp <= a.tol_logp
    ok &= check_metrics(meta, logp_c, y.numpy(), mask.numpy(), K)
    off = 0
    worst = 0.0
    lines = []
    for t in ck["tensors"]:
        size = t["rows"] * t["cols"]
        gc = grads_c[off : off + size]
        off += size
        gr = m.p(t["name"]).grad
        gr = np.zeros(size) if gr is None else gr.detach().numpy().reshape(-1)
        scale = max(np.abs(gr).max(), 1e-12)
        rel = np.abs(gc - gr).max() / scale
        worst = max(worst, rel)
        good = rel <= a.tol_grad or np.abs(gc - gr).max() <= 1e-9
        ok &= good
        lines.append(f"  {t['name']:28s} max|g| {scale:.3e}  rel diff {rel:.2e} {'ok' if good else 'FAIL'}")
    label = f"{a.family} {a.graph} {' '.join(a.extra)}".strip()
    if edge:
        label += f" (edge task, {'directed' if meta['directed'] else 'undirected'}, {meta['P']} pairs, {K} classes)"
    print(f"parity {label}: n={n} edges={ne} loss C {meta['loss']:.9f} ref {loss.item():.9f}")
    print(f"  logp max abs diff {dlogp:.3e} (tol {a.tol_logp:g}) {'ok' if dlogp <= a.tol_logp else 'FAIL'}")
    print("\n".join(lines))
    print(f"parity_{'ok' if ok else 'FAIL'} logp_maxabs={dlogp:.3e} grad_maxrel={worst:.3e}")
    return 0 if ok else 1


def graph_from_export(g, task_name=None):
    """An export-format graph (docs/sheaf-export.md) as tensors: x [n, f] (float32 values),
    the canonical undirected edges (u < v, no duplicates, no self-loops, as the C loader), and
    the task (the first, or task_name): its kind, pairs and directedness."""
    ids = {nd["id"]: i for i, nd in enumerate(g["nodes"])}
    x = torch.tensor(np.array([nd["features"] for nd in g["nodes"]], dtype=np.float32))
    es = sorted({(min(ids[e["src"]], ids[e["dst"]]), max(ids[e["src"]], ids[e["dst"]]))
                 for e in g["edges"] if ids[e["src"]] != ids[e["dst"]]})
    eu = torch.tensor([u for u, _ in es], dtype=torch.int64)
    ev = torch.tensor([v for _, v in es], dtype=torch.int64)
    tasks = g.get("tasks", [])
    task = next((t for t in tasks if task_name is None or t.get("name") == task_name), None)
    return x, eu, ev, task, ids


def ref_logp(ck, g, task_name=None):
    """log-probabilities (float64) of checkpoint ck on export graph g: [nodes, K] or [pairs, classes]."""
    x, eu, ev, task, ids = graph_from_export(g, task_name)
    n, f = x.shape
    dtype = torch.float64
    if ck.get("task", {}).get("kind") == "edge":
        pairs = task["pairs"]
        pu = torch.tensor([ids[p[0]] for p in pairs], dtype=torch.int64)
        pv = torch.tensor([ids[p[1]] for p in pairs], dtype=torch.int64)
        m = model_from_ckpt(ck, n, f, ck["hparams"]["hidden"], eu, ev, dtype)
        with torch.no_grad():
            h = m.node_out(x.to(dtype), training=False)
            return F.log_softmax(m.decode(h, pu, pv, bool(ck["task"].get("directed", False))), dim=1).numpy()
    K = ck["task"]["classes"] if "task" in ck else ck["graph"]["nclass"]
    m = model_from_ckpt(ck, n, f, K, eu, ev, dtype)
    with torch.no_grad():
        return m(x.to(dtype), training=False).numpy()


def reference_name():
    return f"tests/ref/sheaf_ref.py (torch {torch.__version__}, float64)"


def cmd_infer(a):
    """The registry's reference (donto-sheaf register --reference): the checkpoint's
    log-probabilities on an export-format graph, float64, as {"logp": [[...]], "reference"}."""
    ck = json.load(open(a.checkpoint))
    g = json.load(open(a.graph))
    logp = ref_logp(ck, g, a.task)
    with open(a.out, "w") as f:
        json.dump({"logp": [[float(v) for v in row] for row in logp], "reference": reference_name()}, f)
    return 0


def cmd_probe(a):
    """Give a checkpoint a probe (docs/sheaf.md "Probe"): a small seeded random graph in the
    export format with the checkpoint's feature dimension (and pairs for an edge task), and this
    reference's log-probabilities on it. The registry then checks against those numbers."""
    ck = json.load(open(a.checkpoint))
    rng = np.random.default_rng(a.seed)
    f = ck["graph"]["f"]
    task = ck.get("task", {"kind": "node", "classes": ck["graph"]["nclass"]})
    K = task["classes"]
    n = a.nodes
    X = rng.standard_normal((n, f))
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)  # unit rows, as embeddings
    nodes = [{"id": f"q{i}", "features": [float(v) for v in X[i]]} for i in range(n)]
    edges = []
    for _ in range(2 * n):
        u, v = rng.integers(0, n, 2)
        if u != v:
            edges.append({"src": f"q{u}", "dst": f"q{v}"})
    t = {"name": "probe", "classes": [f"c{c}" for c in range(K)]}
    if task.get("kind") == "edge":
        t.update(kind="edge", directed=bool(task.get("directed", False)), pairs=[])
        while len(t["pairs"]) < a.pairs:
            u, v = rng.integers(0, n, 2)
            if u != v:
                t["pairs"].append([f"q{u}", f"q{v}", int(rng.integers(0, K))])
    else:
        t["labels"] = {f"q{i}": int(rng.integers(0, K)) for i in range(n)}
    g = {"format": "donto-sheaf-graph", "version": 2, "provenance": {"source": "sheaf_ref.py probe", "seed": a.seed},
         "feature_dim": f, "nodes": nodes, "edges": edges, "tasks": [t]}
    logp = ref_logp(ck, g)
    ck["probe"] = {"graph": g, "logp": [[float(v) for v in row] for row in logp], "reference": reference_name(),
                   "produced_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(a.out, "w") as fo:
        json.dump(ck, fo, separators=(",", ":"))
    print(f"probe: {n} nodes, {len(logp)} rows x {logp.shape[1]} classes -> {a.out}")
    return 0


def check_metrics(meta, logp_c, y, mask, K):
    """The C metrics of the train set against sklearn's on the same (C) log-probabilities."""
    from sklearn.metrics import accuracy_score, average_precision_score, f1_score, roc_auc_score

    yy, lp = y[mask], logp_c[mask]
    keep = (yy >= 0) & (yy < K)
    yy, lp = yy[keep], lp[keep]
    pred = lp.argmax(1)
    want = {"train_acc": accuracy_score(yy, pred), "train_f1": f1_score(yy, pred, average="macro")}
    if K == 2:
        score = np.exp(lp[:, 1].astype(np.float64))
        want["train_auc"] = roc_auc_score(yy, score)
        want["train_ap"] = average_precision_score(yy, score)
    ok = True
    for k, v in want.items():
        good = abs(meta[k] - v) <= 1e-9
        ok &= good
        print(f"  metric {k:10s} C {meta[k]:.12f} sklearn {v:.12f} {'ok' if good else 'FAIL'}")
    return ok


# ---- bench ---------------------------------------------------------------------
def load_graph_for_bench(spec, data_dir, seed=0):
    """random:N:M:F:K -> a random graph; otherwise a geom-gcn name loaded from the files."""
    if spec.startswith("random:"):
        parts = spec.split(":")
        n, m = int(parts[1]), int(parts[2])
        f = int(parts[3]) if len(parts) > 3 else 64
        K = int(parts[4]) if len(parts) > 4 else 5
        rng = np.random.default_rng(seed)
        x = rng.random((n, f), dtype=np.float32)
        y = rng.integers(0, K, n)
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    else:
        import zipfile, io
        root = os.path.join(data_dir, spec)
        feat = os.path.join(root, "out1_node_feature_label.txt")
        if os.path.exists(feat):
            rows = [l.rstrip("\n").split("\t") for l in open(feat).readlines()[1:]]
            n = len(rows)
            f = len(rows[0][1].split(","))
            x = np.zeros((n, f), np.float32)
            y = np.zeros(n, np.int64)
            for r in rows:
                x[int(r[0])] = np.array(r[1].split(","), np.float32)
                y[int(r[0])] = int(r[2])
        else:
            z = np.load(os.path.join(root, spec + ".npz"))
            x = z["node_features"].astype(np.float32)
            y = z["node_labels"].astype(np.int64)
            n = x.shape[0]
        s = x.sum(1, keepdims=True)
        s[s == 0] = 1
        x = x / s
        e = np.loadtxt(os.path.join(root, "out1_graph_edges.txt"), skiprows=1, dtype=np.int64).reshape(-1, 2)
        src, dst = e[:, 0], e[:, 1]
        K = int(y.max()) + 1
    keep = src != dst
    a, b = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    pairs = np.unique(np.stack([a, b], 1), axis=0)
    return x, y, pairs[:, 0], pairs[:, 1], K


def cmd_bench(a):
    torch.set_num_threads(a.threads)
    x, y, eu, ev, K = load_graph_for_bench(a.graph, a.data_dir)
    n, f = x.shape
    hp = dict(family=a.family, orth=a.orth, d=a.d, layers=a.layers, hidden=a.hidden, add_lp=a.add_lp,
              add_hp=a.add_hp, left_weights=True, right_weights=True, edge_weights=True,
              second_linear=a.second_linear, input_dropout=a.input_dropout, dropout=a.dropout, gen_eps=0.0)
    eu_t, ev_t = torch.tensor(eu), torch.tensor(ev)
    m = SheafModel(hp, n, f, K, eu_t, ev_t, torch.float32)
    # Block path (gathers + index_add). torch 1.13's sparse.mm backward builds a dense
    # (N d')^2 gradient for the sparse values (54 s per chameleon epoch, 1.4 GB), so the
    # block path is the fair reference; --sparse-lap selects the other.
    m.sparse_lap = a.sparse_lap
    dp = m.dp
    H = dp * a.hidden
    P = m.P
    shapes = [("lin1.weight", H, f), ("lin1.bias", 1, H)]
    if a.second_linear:
        shapes += [("lin12.weight", H, H), ("lin12.bias", 1, H)]
    for t in range(a.layers):
        shapes.append((f"sheaf_learner.{t}.weight", P, 2 * H))
        if a.family == "orth":
            shapes.append((f"weight_learner.{t}.weight", 1, 2 * H))
        shapes += [(f"left.{t}.weight", dp, dp), (f"right.{t}.weight", a.hidden, a.hidden), (f"epsilons.{t}", dp, 1)]
    shapes += [("lin2.weight", K, H), ("lin2.bias", 1, K)]
    for name, r, c in shapes:
        m.add(name, r, c)
        with torch.no_grad():
            m.p(name).uniform_(-1 / np.sqrt(max(c, 1)), 1 / np.sqrt(max(c, 1)))
    learner = [p for k, p in m.params.items() if k.startswith("sheaf_learner")]
    other = [p for k, p in m.params.items() if not k.startswith("sheaf_learner")]
    opt = torch.optim.Adam([{"params": learner, "weight_decay": a.wd}, {"params": other, "weight_decay": a.wd}], lr=0.01)
    xt, yt = torch.tensor(x), torch.tensor(y)
    mask = torch.rand(n) < 0.6
    times = []
    for it in range(a.warmup + a.epochs):
        t0 = time.perf_counter()
        m.train()
        opt.zero_grad()
        out = m(xt, training=True)
        loss = F.nll_loss(out[mask], yt[mask])
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if it >= a.warmup:
            times.append(dt)
    import resource
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"epoch_s": float(np.median(times)), "epochs": len(times), "n": n, "edges": len(eu),
                      "peak_rss_mb": rss, "threads": a.threads}))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("parity")
    p.add_argument("--bin", required=True)
    p.add_argument("--family", required=True)
    p.add_argument("--graph", default="random")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--tol-logp", type=float, default=1e-5)
    p.add_argument("--tol-grad", type=float, default=1e-4)
    p.add_argument("extra", nargs=argparse.REMAINDER, help="options passed to the dump helper (after --)")
    i = sub.add_parser("infer", help="log-probabilities of a checkpoint on an export graph (the registry's reference)")
    i.add_argument("--checkpoint", required=True)
    i.add_argument("--graph", required=True)
    i.add_argument("--task", default=None)
    i.add_argument("--out", required=True)
    pr = sub.add_parser("probe", help="write a copy of a checkpoint carrying a probe graph and this reference's outputs")
    pr.add_argument("--checkpoint", required=True)
    pr.add_argument("--out", required=True)
    pr.add_argument("--nodes", type=int, default=20)
    pr.add_argument("--pairs", type=int, default=30)
    pr.add_argument("--seed", type=int, default=1)
    b = sub.add_parser("bench")
    b.add_argument("--graph", required=True)
    b.add_argument("--data-dir", default=None)
    b.add_argument("--family", default="diag")
    b.add_argument("--orth", default="householder")
    b.add_argument("--d", type=int, default=4)
    b.add_argument("--layers", type=int, default=5)
    b.add_argument("--hidden", type=int, default=32)
    b.add_argument("--add-lp", action="store_true")
    b.add_argument("--add-hp", action="store_true")
    b.add_argument("--second-linear", action="store_true")
    b.add_argument("--input-dropout", type=float, default=0.0)
    b.add_argument("--dropout", type=float, default=0.0)
    b.add_argument("--wd", type=float, default=5e-4)
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--epochs", type=int, default=5)
    b.add_argument("--warmup", type=int, default=1)
    b.add_argument("--sparse-lap", action="store_true")
    a = ap.parse_args()
    if a.cmd == "parity":
        if a.extra and a.extra[0] == "--":
            a.extra = a.extra[1:]
        return cmd_parity(a)
    if a.cmd == "infer":
        return cmd_infer(a)
    if a.cmd == "probe":
        return cmd_probe(a)
    return cmd_bench(a)


if __name__ == "__main__":
    sys.exit(main())
