#!/usr/bin/env python3
"""A synthetic donto-sheaf export (version 2, docs/sheaf-export.md) with planted structure, for
the edge-task tests (tests/sheaf_edge.sh). Standard library only; deterministic for a seed.

  nodes:   N claims in G communities (G even); features = a weak community signal (amplitude
           --signal on the community's own coordinate) plus unit Gaussian noise in F dims;
  edges:   "shares_entity" edges, mostly inside a community (degree about --deg), a few across;
  arg_link (directed, 3 classes, metric macro_f1): for a pair (u, v),
           supports  when u and v are in the same community,
           rebuts    when v's community is u's + 1 (mod G): direction matters,
           none      otherwise;
  identity (undirected, 2 classes, metric roc_auc): same when u and v share a community.
The label depends only on communities, which the graph reveals (neighbours average the noise
away) and the features alone barely do: a graph-aware model should beat the MLP baseline.

usage: sheaf_edge_gen.py OUT.json [--nodes N] [--groups G] [--features F] [--pairs P] [--seed S]
"""
import argparse
import json
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--nodes", type=int, default=240)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument("--signal", type=float, default=0.5)
    ap.add_argument("--deg", type=float, default=8.0)
    ap.add_argument("--cross", type=float, default=0.5, help="expected cross-community edges per node")
    ap.add_argument("--pairs", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    N, G, F = a.nodes, a.groups, a.features
    comm = [i % G for i in range(N)]
    nodes = []
    for i in range(N):
        x = [rng.gauss(0.0, 1.0) for _ in range(F)]
        x[comm[i] % F] += a.signal
        nodes.append({"id": f"claim:{i}", "kind": "claim", "features": [round(v, 6) for v in x]})
    members = [[i for i in range(N) if comm[i] == c] for c in range(G)]
    edges, seen = [], set()

    def add(u, v):
        k = (min(u, v), max(u, v))
        if u != v and k not in seen:
            seen.add(k)
            edges.append({"src": f"claim:{u}", "dst": f"claim:{v}", "type": "shares_entity"})

    for u in range(N):
        for _ in range(int(a.deg / 2)):
            add(u, rng.choice(members[comm[u]]))
        if rng.random() < a.cross:
            add(u, rng.randrange(N))

    def sample_pairs(label_of, classes, directed):
        pairs = []
        while len(pairs) < a.pairs:
            u, v = rng.randrange(N), rng.randrange(N)
            if u == v:
                continue
            # balance a little: same-community pairs are rare under uniform sampling
            if rng.random() < 0.3:
                v = rng.choice(members[comm[u]])
                if u == v:
                    continue
            pairs.append([f"claim:{u}", f"claim:{v}", label_of(u, v)])
        idx = list(range(len(pairs)))
        rng.shuffle(idx)
        ntr, nva = int(0.6 * len(idx)), int(0.2 * len(idx))
        split = {"train": sorted(idx[:ntr]), "val": sorted(idx[ntr:ntr + nva]), "test": sorted(idx[ntr + nva:])}
        return pairs, [split]

    def arg(u, v):
        if comm[u] == comm[v]:
            return "supports"
        return "rebuts" if comm[v] == (comm[u] + 1) % G else "none"

    arg_pairs, arg_splits = sample_pairs(arg, ["none", "supports", "rebuts"], True)
    id_pairs, id_splits = sample_pairs(lambda u, v: 1 if comm[u] == comm[v] else 0, ["distinct", "same"], False)
    doc = {
        "format": "donto-sheaf-graph", "version": 2,
        "provenance": {"source": "tests/sheaf_edge_gen.py", "seed": a.seed, "notes": "planted communities"},
        "feature_dim": F, "nodes": nodes,
        "edge_types": ["shares_entity"], "edges": edges,
        "tasks": [
            {"name": "arg_link", "kind": "edge", "classes": ["none", "supports", "rebuts"], "directed": True,
             "metric": "macro_f1", "pairs": arg_pairs, "splits": arg_splits},
            {"name": "identity", "kind": "edge", "classes": ["distinct", "same"], "directed": False,
             "pairs": id_pairs, "splits": id_splits},
        ],
    }
    with open(a.out, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
