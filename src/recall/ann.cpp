// donto-accel: the ANN index, a C face on FAISS. See include/donto/ann.h.
// The only C++ in the project: nothing here may let an exception escape
// into C, so every entry point is one try block that turns exceptions into
// a donto_err.
#include "donto/ann.h"

#include <faiss/AutoTune.h>
#include <faiss/IVFlib.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIVF.h>
#include <faiss/impl/FaissException.h>
#include <faiss/impl/io.h>
#include <faiss/index_factory.h>
#include <faiss/index_io.h>
#include <omp.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

struct donto_ann {
    std::unique_ptr<faiss::Index> idx;
};

namespace {

constexpr char kMagic[8] = {'D', 'O', 'N', 'T', 'O', 'A', 'N', 'N'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeader = 40;

// Turn whatever was thrown into err; always -1 so callers can return it.
int fail(donto_err *err, const char *what) {
    try {
        throw;
    } catch (const faiss::FaissException &e) {
        return donto_seterr(err, "ann: %s: faiss: %s", what, e.what());
    } catch (const std::bad_alloc &) {
        return donto_seterr(err, "ann: %s: out of memory", what);
    } catch (const std::exception &e) {
        return donto_seterr(err, "ann: %s: %s", what, e.what());
    } catch (...) {
        return donto_seterr(err, "ann: %s: unknown C++ exception", what);
    }
}

// A 64-bit FNV-1a variant over 8-byte words: cheap enough to run over a
// multi-GB index at load, strong enough to catch a damaged or half-written
// file. Bytes are buffered into whole words, so the hash does not depend on
// how the stream was cut into writes (FAISS) or reads (the check below).
struct Hasher {
    uint64_t h = 1469598103934665603ULL;
    unsigned char pend[8];
    size_t npend = 0;
    void word(uint64_t w) { h = (h ^ w) * 1099511628211ULL; }
    void feed(const void *p, size_t n) {
        const unsigned char *b = static_cast<const unsigned char *>(p);
        while (npend && n) {
            pend[npend++ & 7] = *b++, n--;  // & 7: npend < 8 always; tells the compiler so
            if (npend == 8) {
                uint64_t w;
                std::memcpy(&w, pend, 8);
                word(w);
                npend = 0;
            }
        }
        for (; n >= 8; b += 8, n -= 8) {
            uint64_t w;
            std::memcpy(&w, b, 8);
            word(w);
        }
        if (n) {  // here npend == 0 (the first loop ran it to 8 or n to 0) and n < 8
            std::memcpy(pend, b, n);
            npend = n;
        }
    }
    uint64_t done() {
        for (size_t i = 0; i < npend; i++) word(pend[i]);
        npend = 0;
        return h;
    }
};

// FAISS serialises through this: bytes go to the file and into the hash.
struct HashWriter : faiss::IOWriter {
    FILE *f;
    Hasher hash;
    uint64_t bytes = 0;
    explicit HashWriter(FILE *fp) : f(fp) { name = "donto-ann"; }
    size_t operator()(const void *ptr, size_t size, size_t nitems) override {
        if (!size || !nitems) return nitems;  // FAISS writes empty vectors with ptr == nullptr
        size_t got = std::fwrite(ptr, size, nitems, f);
        hash.feed(ptr, size * got);
        bytes += size * got;
        return got;
    }
};

// FAISS parses through this: it cannot read past the payload length.
struct BoundedReader : faiss::IOReader {
    FILE *f;
    uint64_t left;
    BoundedReader(FILE *fp, uint64_t n) : f(fp), left(n) { name = "donto-ann"; }
    size_t operator()(void *ptr, size_t size, size_t nitems) override {
        if (!size || !nitems) return nitems;
        size_t can = static_cast<size_t>(left / size);
        if (nitems > can) nitems = can;
        size_t got = std::fread(ptr, size, nitems, f);
        left -= size * got;
        return got;
    }
};

void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
uint32_t get32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

// The default probe count of an IVF index: 32 lists, or 1/128 of them on
// very large indexes. Real sentence embeddings need more probes than
// clustered synthetic data (MiniLM claims, 128 lists: recall@10 0.96 at 32
// probes, 0.92 at 16), while at 1M vectors (4096 lists) the scan cost grows
// with every probe (p50 3.5 / 7.9 / 30.9 ms at 16 / 32 / 128 probes on our
// shared 2 cores); see docs/recall.md.
size_t default_nprobe(size_t nlist) {
    size_t p = nlist / 128;
    if (p < 32) p = 32;
    return p < nlist ? p : nlist;
}

void apply_search(faiss::Index *idx, const donto_ann_opts *o) {
    if (o && o->search && *o->search) {
        faiss::ParameterSpace().set_index_parameters(idx, o->search);
    } else if (auto *h = dynamic_cast<faiss::IndexHNSW *>(idx)) {
        h->hnsw.efSearch = DONTO_ANN_HNSW_EF_SEARCH;
    } else if (auto *ivf = faiss::ivflib::try_extract_index_ivf(idx)) {
        ivf->nprobe = default_nprobe(ivf->nlist);
    }
    if (auto *ivf = faiss::ivflib::try_extract_index_ivf(idx)) ivf->parallel_mode = 1;  // see donto_ann_search
}

// "auto": IVF-Flat with about 4 sqrt(n) lists (a power of two), but never
// fewer than 39 training points per list (FAISS's own floor), so small
// collections get few lists (and below 78 vectors a flat scan).
std::string auto_kind(size_t n) {
    double want = 4.0 * std::sqrt(static_cast<double>(n));
    size_t nlist = 1;
    while (nlist * 2 <= want * 1.414) nlist *= 2;  // nearest power of two (geometric)
    while (nlist > 1 && nlist * 39 > n) nlist /= 2;
    if (nlist == 1) return "Flat";  // one list would be a scan anyway
    return "IVF" + std::to_string(nlist) + ",Flat";
}

// Run f with OpenMP limited to `threads` in this thread (0: unchanged),
// restoring the caller's setting afterwards: the setting is per-thread
// state and the caller's own OpenMP code (the encoder) must not see it.
template <class F> void with_threads(int threads, F f) {
    int before = omp_get_max_threads();
    if (threads > 0) omp_set_num_threads(threads);
    try {
        f();
    } catch (...) {
        omp_set_num_threads(before);
        throw;
    }
    omp_set_num_threads(before);
}

}  // namespace

extern "C" {

void donto_ann_default_opts(donto_ann_opts *o) {
    o->kind = DONTO_ANN_DEFAULT_KIND;
    o->search = nullptr;
    o->threads = 0;
}

int donto_ann_build(int dim, const float *x, size_t n, const donto_ann_opts *o, donto_ann **out,
                    donto_err *err) {
    *out = nullptr;
    if (dim <= 0) return donto_seterr(err, "ann: build: dimension %d", dim);
    try {
        std::string kind = o && o->kind ? o->kind : DONTO_ANN_DEFAULT_KIND;
        if (kind == "auto") kind = auto_kind(n);
        std::unique_ptr<faiss::Index> idx(faiss::index_factory(dim, kind.c_str(), faiss::METRIC_INNER_PRODUCT));
        if (auto *h = dynamic_cast<faiss::IndexHNSW *>(idx.get())) h->hnsw.efConstruction = DONTO_ANN_HNSW_EF_CONSTRUCTION;
        if (auto *ivf = faiss::ivflib::try_extract_index_ivf(idx.get())) {
            // k-means on a sample of 64 points per list, 10 rounds: the
            // lists only have to be good enough for nprobe to cover a
            // query's neighbours; FAISS's defaults (256, 25) cost 10x more
            // build time for no measurable recall here (docs/recall.md).
            ivf->cp.max_points_per_centroid = 64;
            ivf->cp.niter = 10;
        }
        with_threads(o ? o->threads : 0, [&] {
            if (!idx->is_trained) {
                if (n == 0) throw std::runtime_error(kind + " needs training data and none was given");
                idx->train(static_cast<faiss::Index::idx_t>(n), x);
            }
            if (n) idx->add(static_cast<faiss::Index::idx_t>(n), x);
        });
        apply_search(idx.get(), o);
        donto_ann *a = new donto_ann;
        a->idx = std::move(idx);
        *out = a;
        return 0;
    } catch (...) {
        return fail(err, "build");
    }
}

int donto_ann_add(donto_ann *a, const float *x, size_t n, donto_err *err) {
    if (!n) return 0;
    try {
        a->idx->add(static_cast<faiss::Index::idx_t>(n), x);
        return 0;
    } catch (...) {
        return fail(err, "add");
    }
}

int donto_ann_search(const donto_ann *a, const float *q, size_t nq, size_t k, float *scores,
                     int64_t *labels, donto_err *err) {
    if (!nq || !k) return 0;
    try {
        // IVF indexes search with parallel_mode 1 (apply_search): the probed
        // lists of each query are split over the OpenMP team, so a single
        // query, the usual recall call, uses every core (p50 2.66 -> 1.80 ms,
        // IVF2048 at 300k vectors on 2 cores); FAISS's default splits only
        // the queries, and one query ran on one thread.
        a->idx->search(static_cast<faiss::Index::idx_t>(nq), q, static_cast<faiss::Index::idx_t>(k), scores,
                       reinterpret_cast<faiss::Index::idx_t *>(labels));
        // FAISS marks empty slots with label -1 and an arbitrary score.
        for (size_t i = 0; i < nq * k; i++)
            if (labels[i] < 0) scores[i] = -INFINITY;
        return 0;
    } catch (...) {
        return fail(err, "search");
    }
}

int donto_ann_set_search(donto_ann *a, const char *params, donto_err *err) {
    try {
        donto_ann_opts o = {nullptr, params, 0};
        apply_search(a->idx.get(), &o);
        return 0;
    } catch (...) {
        return fail(err, "search parameters");
    }
}

int donto_ann_save(const donto_ann *a, const char *path, donto_err *err) {
    std::string tmp = std::string(path) + ".tmp";
    FILE *f = std::fopen(tmp.c_str(), "wb");
    if (!f) return donto_seterr(err, "ann: save %s: %s", tmp.c_str(), std::strerror(errno));
    try {
        unsigned char hdr[kHeader] = {0};
        if (std::fwrite(hdr, 1, kHeader, f) != kHeader) throw std::runtime_error("write failed");
        HashWriter w(f);
        faiss::write_index(a->idx.get(), &w);
        std::memcpy(hdr, kMagic, 8);
        put32(hdr + 8, kVersion);
        put32(hdr + 12, static_cast<uint32_t>(a->idx->d));
        put64(hdr + 16, static_cast<uint64_t>(a->idx->ntotal));
        put64(hdr + 24, w.bytes);
        put64(hdr + 32, w.hash.done());
        if (std::fseek(f, 0, SEEK_SET) || std::fwrite(hdr, 1, kHeader, f) != kHeader || std::fflush(f) ||
            std::ferror(f))
            throw std::runtime_error(std::string("write failed: ") + std::strerror(errno));
    } catch (...) {
        std::fclose(f);
        std::remove(tmp.c_str());
        fail(err, "save");
        return donto_preerr(err, "%s", path);
    }
    if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path) != 0) {
        int e = errno;
        std::remove(tmp.c_str());
        return donto_seterr(err, "ann: save %s: %s", path, std::strerror(e));
    }
    return 0;
}

int donto_ann_load(const char *path, int dim, const donto_ann_opts *o, donto_ann **out, donto_err *err) {
    *out = nullptr;
    FILE *f = std::fopen(path, "rb");
    if (!f) return donto_seterr(err, "ann: %s: %s", path, std::strerror(errno));
    int rc = -1;
    try {
        unsigned char hdr[kHeader];
        size_t got = std::fread(hdr, 1, kHeader, f);
        if (got < 8 || std::memcmp(hdr, kMagic, 8) != 0) {
            donto_seterr(err, "ann: %s: not a donto ANN index file", path);
        } else if (got < kHeader) {
            donto_seterr(err, "ann: %s: truncated (header cut at %zu of %zu bytes)", path, got, kHeader);
        } else if (get32(hdr + 8) != kVersion) {
            donto_seterr(err, "ann: %s: format version %u, this build reads %u", path, get32(hdr + 8), kVersion);
        } else {
            uint32_t fdim = get32(hdr + 12);
            uint64_t ntotal = get64(hdr + 16), len = get64(hdr + 24), hash = get64(hdr + 32);
            std::fseek(f, 0, SEEK_END);
            long size = std::ftell(f);
            if (dim > 0 && fdim != static_cast<uint32_t>(dim)) {
                donto_seterr(err, "ann: %s: holds %u-d vectors, expected %d-d", path, fdim, dim);
            } else if (size < 0 || static_cast<uint64_t>(size) < kHeader + len) {
                donto_seterr(err, "ann: %s: truncated (%ld bytes, the header promises %llu)", path, size,
                             static_cast<unsigned long long>(kHeader + len));
            } else if (static_cast<uint64_t>(size) > kHeader + len) {
                donto_seterr(err, "ann: %s: %llu unexpected bytes after the index", path,
                             static_cast<unsigned long long>(size - (kHeader + len)));
            } else {
                // Check the hash before FAISS parses anything: its reader
                // trusts sizes it reads, so damaged bytes must never reach it.
                std::fseek(f, kHeader, SEEK_SET);
                Hasher hs;
                std::unique_ptr<unsigned char[]> buf(new unsigned char[1 << 20]);
                uint64_t left = len;
                while (left) {
                    size_t want = left < (1u << 20) ? static_cast<size_t>(left) : (1u << 20);
                    size_t r = std::fread(buf.get(), 1, want, f);
                    if (r != want) break;
                    hs.feed(buf.get(), r);
                    left -= r;
                }
                if (left || hs.done() != hash) {
                    donto_seterr(err, "ann: %s: damaged (checksum mismatch)", path);
                } else {
                    std::fseek(f, kHeader, SEEK_SET);
                    BoundedReader rd(f, len);
                    std::unique_ptr<faiss::Index> idx(faiss::read_index(&rd));
                    if (idx->d != static_cast<faiss::Index::idx_t>(fdim) ||
                        static_cast<uint64_t>(idx->ntotal) != ntotal || idx->metric_type != faiss::METRIC_INNER_PRODUCT) {
                        donto_seterr(err, "ann: %s: index contents disagree with its header", path);
                    } else {
                        apply_search(idx.get(), o);
                        donto_ann *a = new donto_ann;
                        a->idx = std::move(idx);
                        *out = a;
                        rc = 0;
                    }
                }
            }
        }
    } catch (...) {
        fail(err, "load");
        donto_preerr(err, "%s", path);
        rc = -1;
    }
    std::fclose(f);
    return rc;
}

void donto_ann_describe(const donto_ann *a, char *buf, size_t cap) {
    if (!cap) return;
    std::string d = "Flat";
    if (auto *h = dynamic_cast<const faiss::IndexHNSW *>(a->idx.get()))
        d = "HNSW" + std::to_string(h->hnsw.nb_neighbors(1)) + ",Flat efSearch=" + std::to_string(h->hnsw.efSearch);
    else if (auto *ivf = faiss::ivflib::try_extract_index_ivf(a->idx.get()))
        d = "IVF" + std::to_string(ivf->nlist) + ",Flat nprobe=" + std::to_string(ivf->nprobe);
    std::snprintf(buf, cap, "%s", d.c_str());
}

size_t donto_ann_ntotal(const donto_ann *a) { return a ? static_cast<size_t>(a->idx->ntotal) : 0; }
int donto_ann_dim(const donto_ann *a) { return a ? static_cast<int>(a->idx->d) : 0; }
void donto_ann_free(donto_ann *a) { delete a; }

}  // extern "C"
