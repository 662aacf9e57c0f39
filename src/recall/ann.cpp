// donto-accel: the ANN index, a C face on FAISS. See include/donto/ann.h.
// The only C++ in the project: nothing here may let an exception escape
// into C, so every entry point is one try block that turns exceptions into
// a donto_err.
#include "donto/ann.h"
#include "donto/vecfile.h"

#include <faiss/AutoTune.h>
#include <faiss/IVFlib.h>
#include <faiss/IndexFlat.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIVF.h>
#include <faiss/IndexIVFPQ.h>
#include <faiss/IndexScalarQuantizer.h>
#include <faiss/impl/FaissException.h>
#include <faiss/impl/io.h>
#include <faiss/index_factory.h>
#include <faiss/index_io.h>
#include <faiss/utils/Heap.h>
#include <faiss/utils/distances.h>
#include <faiss/invlists/InvertedLists.h>
#include <omp.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <exception>
#include <vector>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

struct donto_ann {
    std::unique_ptr<faiss::Index> idx;
    const donto_vecfile *rows = nullptr; // float32 rows for re-ranking (borrowed)
    size_t rerank = DONTO_ANN_RERANK;
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

// "auto": IVF with about 4 sqrt(n) lists (a power of two), but never fewer
// than 39 training points per list (FAISS's own floor), so small collections
// get few lists (and below 78 vectors a flat scan, nlist 0 here).
size_t auto_nlist(size_t n) {
    double want = 4.0 * std::sqrt(static_cast<double>(n));
    size_t nlist = 1;
    while (nlist * 2 <= want * 1.414) nlist *= 2;  // nearest power of two (geometric)
    while (nlist > 1 && nlist * 39 > n) nlist /= 2;
    return nlist == 1 ? 0 : nlist;  // one list would be a scan anyway
}

// The codecs "auto" may put in the lists, best first: IVF-Flat (exact
// scores) while n <= DONTO_ANN_FLAT_MAX, then the compressed ladder, each
// re-ranked against the float32 rows. The ladder's order comes from
// bench/recall-scale (docs/recall.md): recall@10 and latency per byte.
const char *const kLadder[] = {"PQ96", "PQ48"};

size_t code_bytes(const std::string &codec, int dim) {
    if (codec == "Flat") return 4 * static_cast<size_t>(dim);
    if (codec == "SQ8") return static_cast<size_t>(dim);
    if (codec == "SQ4") return (static_cast<size_t>(dim) + 1) / 2;
    if (codec.rfind("PQ", 0) == 0) return static_cast<size_t>(std::stoul(codec.substr(2)));
    return 4 * static_cast<size_t>(dim);
}

// Memory of an IVF index with nlist lists over n vectors: codes and 8-byte
// ids in the lists, the coarse centroids, a PQ's 256 centroids per
// sub-quantiser, ~48 bytes of list bookkeeping each. nlist 0: a flat scan.
size_t estimate(size_t n, int dim, size_t nlist, const std::string &codec) {
    size_t d = static_cast<size_t>(dim);
    if (!nlist) return n * 4 * d;
    size_t b = n * (code_bytes(codec, dim) + 8) + nlist * (4 * d + 48);
    if (codec.rfind("PQ", 0) == 0) b += 256 * 4 * d;
    return b;
}

std::string kind_of(size_t nlist, const std::string &codec) {
    return nlist ? "IVF" + std::to_string(nlist) + "," + codec : "Flat";
}

// "2.40 GB" / "15.4 KB": sizes in messages, readable at any scale.
std::string human(size_t b) {
    char t[32];
    double x = static_cast<double>(b);
    if (x >= 1e9) std::snprintf(t, sizeof t, "%.2f GB", x / 1e9);
    else if (x >= 1e6) std::snprintf(t, sizeof t, "%.1f MB", x / 1e6);
    else std::snprintf(t, sizeof t, "%.1f KB", x / 1e3);
    return t;
}

// Resolve "auto" for n vectors under the bound: the first that fits.
// Throws with the message for the caller when none does.
std::string choose(size_t n, int dim, const donto_ann_opts *o, size_t *bytes) {
    size_t bound = o && o->memory_gb > 0 ? static_cast<size_t>(o->memory_gb * 1e9) : 0;
    size_t nlist = auto_nlist(n);
    std::vector<std::string> codecs;
    if (!nlist || n <= DONTO_ANN_FLAT_MAX) codecs.push_back("Flat");
    if (nlist)
        for (const char *c : kLadder) codecs.push_back(c);
    size_t last = 0;
    for (const auto &c : codecs) {
        last = estimate(n, dim, nlist, c);
        if (!bound || last <= bound) {
            if (bytes) *bytes = last;
            return kind_of(nlist, c);
        }
    }
    char msg[320];
    std::snprintf(msg, sizeof msg,
                  "%zu %d-d vectors need %s even as %s (the smallest index); the memory bound "
                  "(--index-memory-gb) is %s: refused",
                  n, dim, human(last).c_str(), kind_of(nlist, codecs.back()).c_str(), human(bound).c_str());
    throw std::runtime_error(msg);
}

// The codec of a built index ("Flat", "SQ8", "PQ48", ...) and its lists.
std::string codec_of(const faiss::Index *idx, size_t *nlist) {
    *nlist = 0;
    auto *ivf = faiss::ivflib::try_extract_index_ivf(const_cast<faiss::Index *>(idx));
    if (!ivf) return dynamic_cast<const faiss::IndexHNSW *>(idx) ? "HNSW" : "Flat";
    *nlist = ivf->nlist;
    if (auto *pq = dynamic_cast<const faiss::IndexIVFPQ *>(ivf)) return "PQ" + std::to_string(pq->pq.M);
    if (auto *sq = dynamic_cast<const faiss::IndexIVFScalarQuantizer *>(ivf)) {
        switch (sq->sq.qtype) {
            case faiss::ScalarQuantizer::QT_8bit: return "SQ8";
            case faiss::ScalarQuantizer::QT_4bit: return "SQ4";
            case faiss::ScalarQuantizer::QT_fp16: return "SQfp16";
            default: return "SQ";
        }
    }
    return "Flat";
}

bool lossy(const faiss::Index *idx) {
    size_t nl;
    std::string c = codec_of(idx, &nl);
    return c != "Flat" && c != "HNSW";
}

std::unique_ptr<faiss::Index> make_index(int dim, const std::string &kind) {
    std::unique_ptr<faiss::Index> idx(faiss::index_factory(dim, kind.c_str(), faiss::METRIC_INNER_PRODUCT));
    if (auto *h = dynamic_cast<faiss::IndexHNSW *>(idx.get())) h->hnsw.efConstruction = DONTO_ANN_HNSW_EF_CONSTRUCTION;
    if (auto *ivf = faiss::ivflib::try_extract_index_ivf(idx.get())) {
        // k-means on a sample of 64 points per list, 10 rounds: the
        // lists only have to be good enough for nprobe to cover a
        // query's neighbours; FAISS's defaults (256, 25) cost 10x more
        // build time for no measurable recall here (docs/recall.md).
        ivf->cp.max_points_per_centroid = 64;
        ivf->cp.niter = 10;
        if (auto *pq = dynamic_cast<faiss::IndexIVFPQ *>(ivf)) {
            pq->pq.cp.niter = 15;
            pq->do_polysemous_training = false;  // FAISS's default: minutes of annealing, unused by us
        }
    }
    return idx;
}

// The nearest codeword for a product quantiser's k-means, whose sub-vectors
// are 4 floats (PQ96) or 8 (PQ48). FAISS's own assignment (IndexFlatL2)
// goes through BLAS above 20 queries, and an sgemm of inner dimension 4 or
// 8 is mostly overhead: filling C, OpenBLAS waking its threads, OpenMP's
// threads spinning meanwhile (`perf` of a 10M PQ96 build: sgemm_kernel 5%
// of the codebook phase, libgomp's spin and sched_yield 43%). Here one
// OpenMP loop over the queries: for each, ||c||^2 - 2 q.c over the
// codewords kept transposed (dim-major, so the inner loop runs along
// codewords and vectorises), then the argmin. Exact (the same expansion
// FAISS uses). Search with k = 1 only: all k-means asks.
struct CodewordL2 : faiss::Index {
    std::vector<float> cb;  // [ntotal][d], as added
    std::vector<float> ct;  // [d][ntotal], transposed
    std::vector<float> norm;  // [ntotal]: ||c||^2
    explicit CodewordL2(int dim) : faiss::Index(dim, faiss::METRIC_L2) { is_trained = true; }
    void add(idx_t n, const float *x) override {
        cb.insert(cb.end(), x, x + n * d);
        ntotal += n;
        const size_t m = static_cast<size_t>(ntotal), dd = static_cast<size_t>(d);
        ct.assign(dd * m, 0.0f);
        norm.assign(m, 0.0f);
        for (size_t j = 0; j < m; j++)
            for (size_t t = 0; t < dd; t++) {
                const float c = cb[j * dd + t];
                ct[t * m + j] = c;
                norm[j] += c * c;
            }
    }
    void reset() override {
        cb.clear(), ct.clear(), norm.clear();
        ntotal = 0;
    }
    void search(idx_t n, const float *x, idx_t k, float *dis, idx_t *lab,
                const faiss::SearchParameters * = nullptr) const override {
        if (k != 1) throw std::runtime_error("codeword assignment: k must be 1");
        const size_t m = static_cast<size_t>(ntotal), dd = static_cast<size_t>(d);
#pragma omp parallel
        {
            std::vector<float> sc(m);
#pragma omp for schedule(static)
            for (idx_t i = 0; i < n; i++) {
                const float *q = x + static_cast<size_t>(i) * dd;
                float qq = 0;
                for (size_t j = 0; j < m; j++) sc[j] = norm[j];
                for (size_t t = 0; t < dd; t++) {
                    const float a = -2.0f * q[t];
                    const float *row = ct.data() + t * m;
                    qq += q[t] * q[t];
                    for (size_t j = 0; j < m; j++) sc[j] += a * row[j];
                }
                size_t best = 0;
                for (size_t j = 1; j < m; j++)
                    if (sc[j] < sc[best]) best = j;
                dis[i] = m ? std::max(0.0f, qq + sc[best]) : HUGE_VALF;
                lab[i] = m ? static_cast<idx_t>(best) : -1;
            }
        }
    }
};

// Train idx on x [n, d]: FAISS's own training, with CodewordL2 assigning a
// product quantiser's sub-vectors (it is not kept: FAISS never saves it).
void train(faiss::Index *idx, size_t n, const float *x) {
    faiss::ProductQuantizer *pq = nullptr;
    if (auto *ivfpq = dynamic_cast<faiss::IndexIVFPQ *>(idx)) pq = &ivfpq->pq;
    std::unique_ptr<CodewordL2> assign;
    if (pq && pq->dsub <= 16) {
        assign.reset(new CodewordL2(static_cast<int>(pq->dsub)));
        pq->assign_index = assign.get();
    }
    try {
        idx->train(static_cast<faiss::Index::idx_t>(n), x);
    } catch (...) {
        if (pq) pq->assign_index = nullptr;
        throw;
    }
    if (pq) pq->assign_index = nullptr;
}

// Exact re-rank: for each query, score the candidates cand [nq, kc] against
// the float32 rows and keep the best k, best first.
void rerank(const donto_ann *a, const float *q, size_t nq, size_t kc, const int64_t *cand, size_t k,
            float *scores, int64_t *labels) {
    const float *rows = donto_vecfile_rows(a->rows);
    size_t nrows = donto_vecfile_n(a->rows), d = static_cast<size_t>(a->idx->d);
    std::vector<std::pair<float, int64_t>> v;
    donto_vecfile_prefetch(a->rows, cand, nq * kc);  // every candidate's read in flight at once
    for (size_t i = 0; i < nq; i++) {
        v.clear();
        const float *qi = q + i * d;
        for (size_t j = 0; j < kc; j++) {
            int64_t l = cand[i * kc + j];
            if (l < 0 || static_cast<size_t>(l) >= nrows) continue;
            const float *r = rows + static_cast<size_t>(l) * d;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            size_t m = 0;
            for (; m + 4 <= d; m += 4)
                s0 += qi[m] * r[m], s1 += qi[m + 1] * r[m + 1], s2 += qi[m + 2] * r[m + 2], s3 += qi[m + 3] * r[m + 3];
            for (; m < d; m++) s0 += qi[m] * r[m];
            v.emplace_back((s0 + s1) + (s2 + s3), l);
        }
        size_t keep = std::min(k, v.size());
        std::partial_sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(keep), v.end(),
                          [](const std::pair<float, int64_t> &x, const std::pair<float, int64_t> &y) {
                              return x.first > y.first || (x.first == y.first && x.second < y.second);
                          });
        for (size_t j = 0; j < k; j++) {
            scores[i * k + j] = j < keep ? v[j].first : -INFINITY;
            labels[i * k + j] = j < keep ? v[j].second : -1;
        }
    }
}

// The scan of one query's probed lists in an IVF-PQ index of 8-bit codes
// with the inner-product metric (what "auto" builds above
// DONTO_ANN_FLAT_MAX): score = centroid score (by_residual) + the sum over
// the M sub-quantisers of the query's table entry for the code's byte,
// the k best kept in FAISS's heap. FAISS's own scanner sums the M entries
// in one dependent chain, ~4 cycles an add (M = 96: ~380 cycles a code;
// 78k codes at 10M vectors, 128 probes), and Debian's build has no SIMD
// variant of it. Here eight chains. The probed lists are split over the
// team by their code counts (FAISS splits them by number), each thread
// keeps its own heap, and the heaps are merged. The answers are FAISS's up
// to float rounding of the sums (test_ann compares both). Null when the
// index is not one it can serve (nbits != 8, L2, polysemous filtering, a
// code budget): FAISS's own scan runs then.
const faiss::IndexIVFPQ *own_scan(const faiss::IndexIVF *ivf) {
    auto *pq = dynamic_cast<const faiss::IndexIVFPQ *>(ivf);
    if (!pq || pq->pq.nbits != 8 || pq->metric_type != faiss::METRIC_INNER_PRODUCT || pq->polysemous_ht ||
        ivf->max_codes || pq->code_size != pq->pq.M)
        return nullptr;
    return pq;
}

// Sum of lut[m][code[m]] over m < M, lut [M, 256]: eight independent chains.
inline float pq_sum(const float *lut, const uint8_t *code, size_t M) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t m = 0;
    for (; m + 8 <= M; m += 8, lut += 8 * 256)
        for (size_t j = 0; j < 8; j++) s[j] += lut[j * 256 + code[m + j]];
    for (size_t j = 0; m < M; m++, j++, lut += 256) s[j] += lut[code[m]];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

void scan_pq(const faiss::IndexIVFPQ *ivf, const float *q, const faiss::Index::idx_t *lists, const float *cdis,
             size_t np, size_t k, float *dis, faiss::Index::idx_t *lab) {
    using idx_t = faiss::Index::idx_t;
    using C = faiss::CMin<float, idx_t>;  // keeps the largest: its top is the smallest kept
    const size_t M = ivf->pq.M;
    std::vector<float> lut(M * 256);
    ivf->pq.compute_inner_prod_table(q, lut.data());
    const faiss::InvertedLists *il = ivf->invlists;
    // Split the probed lists into nt runs of about equal code counts.
    std::vector<size_t> sz(np);
    size_t total = 0;
    for (size_t j = 0; j < np; j++) total += sz[j] = lists[j] < 0 ? 0 : il->list_size(static_cast<size_t>(lists[j]));
    int nt = omp_get_max_threads();
    if (nt < 1 || total < 8192) nt = 1;  // a small scan: not worth waking the team
    std::vector<size_t> cut(static_cast<size_t>(nt) + 1, np);
    cut[0] = 0;
    for (size_t j = 0, acc = 0, t = 1; j < np && t < static_cast<size_t>(nt); j++) {
        acc += sz[j];
        if (acc * static_cast<size_t>(nt) >= total * t) cut[t++] = j + 1;
    }
    std::vector<float> hd(static_cast<size_t>(nt) * k);
    std::vector<idx_t> hi(static_cast<size_t>(nt) * k);
    std::exception_ptr thrown;  // nothing may leave an OpenMP region: kept, rethrown after
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        size_t t = static_cast<size_t>(omp_get_thread_num());
        float *D = hd.data() + t * k;
        idx_t *I = hi.data() + t * k;
        faiss::heap_heapify<C>(k, D, I);
        try {
            for (size_t j = cut[t]; j < cut[t + 1]; j++) {
                if (!sz[j]) continue;
                size_t list = static_cast<size_t>(lists[j]);
                faiss::InvertedLists::ScopedCodes codes(il, list);
                faiss::InvertedLists::ScopedIds ids(il, list);
                const float dis0 = ivf->by_residual ? cdis[j] : 0.0f;
                const uint8_t *c = codes.get();
                for (size_t r = 0; r < sz[j]; r++, c += M) {
                    float v = dis0 + pq_sum(lut.data(), c, M);
                    if (C::cmp(D[0], v)) faiss::heap_replace_top<C>(k, D, I, v, ids.get()[r]);
                }
            }
        } catch (...) {
#pragma omp critical(donto_scan_pq)
            if (!thrown) thrown = std::current_exception();
        }
    }
    if (thrown) std::rethrow_exception(thrown);
    for (size_t t = 1; t < static_cast<size_t>(nt); t++)  // merge into thread 0's heap
        for (size_t j = 0; j < k; j++)
            if (hi[t * k + j] >= 0 && C::cmp(hd[0], hd[t * k + j]))
                faiss::heap_replace_top<C>(k, hd.data(), hi.data(), hd[t * k + j], hi[t * k + j]);
    faiss::heap_reorder<C>(k, hd.data(), hi.data());
    std::copy(hd.begin(), hd.begin() + static_cast<std::ptrdiff_t>(k), dis);
    std::copy(hi.begin(), hi.begin() + static_cast<std::ptrdiff_t>(k), lab);
}

// The coarse step of a small search (fewer queries than FAISS's BLAS
// threshold; recall asks one at a time): the nprobe lists whose centroids
// have the largest inner product with each query, then the scan of those
// lists: scan_pq where own_scan serves the index, else FAISS's own
// (search_preassigned, same parallel mode). FAISS's coarse step
// (IndexFlatIP::search) runs a small search on one thread, and Debian
// builds FAISS for baseline x86-64, where fvec_inner_product is the scalar
// reference loop: 6% of a 1M query's samples over 4096 centroids (`perf`),
// and 16384 x 384 multiply-adds, a dependent chain, per query at 10M. Here
// the dot products are vectorised (omp simd) and split over the team. The
// lists and their order are FAISS's, up to float rounding: ties in the
// centroid score go to the lower list number. False when the index is not
// an IVF over a flat inner-product quantiser: FAISS's own search runs then.
bool search_small(const faiss::Index *idx, size_t nq, const float *q, size_t k, float *dis,
                  faiss::Index::idx_t *lab) {
    using idx_t = faiss::Index::idx_t;
    auto *ivf = dynamic_cast<const faiss::IndexIVF *>(idx);
    if (!ivf || nq == 0 || nq >= static_cast<size_t>(faiss::distance_compute_blas_threshold)) return false;
    // index_factory's quantiser is an IndexFlat with the IP metric,
    // read_index's an IndexFlatIP: both are IndexFlat.
    auto *flat = dynamic_cast<const faiss::IndexFlat *>(ivf->quantizer);
    if (!flat || flat->metric_type != faiss::METRIC_INNER_PRODUCT || ivf->metric_type != faiss::METRIC_INNER_PRODUCT ||
        flat->ntotal != static_cast<idx_t>(ivf->nlist))
        return false;
    const size_t nlist = ivf->nlist, d = static_cast<size_t>(ivf->d), np = std::min<size_t>(ivf->nprobe, nlist);
    if (!np) return false;
    const float *cen = flat->get_xb();
    std::vector<float> sc(nq * nlist);  // [nq, nlist]
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < static_cast<int64_t>(nlist); j++) {
        const float *c = cen + static_cast<size_t>(j) * d;
        for (size_t i = 0; i < nq; i++) {
            const float *qi = q + i * d;
            float s = 0;
#pragma omp simd reduction(+ : s)
            for (size_t m = 0; m < d; m++) s += qi[m] * c[m];
            sc[i * nlist + static_cast<size_t>(j)] = s;
        }
    }
    std::vector<idx_t> assign(nq * np), ord(nlist);
    std::vector<float> cdis(nq * np);
    for (size_t i = 0; i < nq; i++) {
        const float *si = sc.data() + i * nlist;
        for (size_t j = 0; j < nlist; j++) ord[j] = static_cast<idx_t>(j);
        std::partial_sort(ord.begin(), ord.begin() + static_cast<std::ptrdiff_t>(np), ord.end(),
                          [si](idx_t x, idx_t y) { return si[x] > si[y] || (si[x] == si[y] && x < y); });
        for (size_t j = 0; j < np; j++) assign[i * np + j] = ord[j], cdis[i * np + j] = si[ord[j]];
    }
    if (const faiss::IndexIVFPQ *pq = own_scan(ivf)) {
        for (size_t i = 0; i < nq; i++)
            scan_pq(pq, q + i * d, assign.data() + i * np, cdis.data() + i * np, np, k, dis + i * k, lab + i * k);
        return true;
    }
    faiss::SearchParametersIVF sp;
    sp.nprobe = np;
    sp.max_codes = ivf->max_codes;
    ivf->search_preassigned(static_cast<idx_t>(nq), q, static_cast<idx_t>(k), assign.data(), cdis.data(), dis, lab,
                            false, &sp);
    return true;
}

// The index's k best for each query: search_small when it applies, else
// FAISS's own search.
void index_search(const faiss::Index *idx, size_t nq, const float *q, size_t k, float *dis, faiss::Index::idx_t *lab) {
    if (search_small(idx, nq, q, k, dis, lab)) return;
    idx->search(static_cast<faiss::Index::idx_t>(nq), q, static_cast<faiss::Index::idx_t>(k), dis, lab);
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

// The caller's progress callback, when it gave one (donto_ann_progress_fn).
void progress(const donto_ann_opts *o, const char *phase, size_t done, size_t total) {
    if (o && o->progress) o->progress(o->progress_ctx, phase, done, total);
}

}  // namespace

extern "C" {

void donto_ann_default_opts(donto_ann_opts *o) {
    o->kind = DONTO_ANN_DEFAULT_KIND;
    o->search = nullptr;
    o->threads = 0;
    o->memory_gb = 0;
    o->rerank = 0;
    o->progress = nullptr;
    o->progress_ctx = nullptr;
}

int donto_ann_choose(size_t n, int dim, const donto_ann_opts *o, char *kind, size_t cap, size_t *bytes,
                     donto_err *err) {
    try {
        std::string k = o && o->kind ? o->kind : DONTO_ANN_DEFAULT_KIND;
        size_t b = 0;
        if (k == "auto") k = choose(n, dim, o, &b);
        if (bytes) *bytes = b;
        std::snprintf(kind, cap, "%s", k.c_str());
        return 0;
    } catch (...) {
        return fail(err, "index choice");
    }
}

static donto_ann *wrap(std::unique_ptr<faiss::Index> idx, const donto_ann_opts *o) {
    apply_search(idx.get(), o);
    donto_ann *a = new donto_ann;
    a->idx = std::move(idx);
    if (o && o->rerank) a->rerank = o->rerank;
    return a;
}

int donto_ann_build(int dim, const float *x, size_t n, const donto_ann_opts *o, donto_ann **out,
                    donto_err *err) {
    *out = nullptr;
    if (dim <= 0) return donto_seterr(err, "ann: build: dimension %d", dim);
    try {
        std::string kind = o && o->kind ? o->kind : DONTO_ANN_DEFAULT_KIND;
        if (kind == "auto") kind = choose(n, dim, o, nullptr);
        std::unique_ptr<faiss::Index> idx = make_index(dim, kind);
        with_threads(o ? o->threads : 0, [&] {
            if (!idx->is_trained) {
                if (n == 0) throw std::runtime_error(kind + " needs training data and none was given");
                progress(o, "train", 0, n);
                train(idx.get(), n, x);
                progress(o, "train", n, n);
            }
            if (n) {
                progress(o, "add", 0, n);
                idx->add(static_cast<faiss::Index::idx_t>(n), x);
                progress(o, "add", n, n);
            }
        });
        *out = wrap(std::move(idx), o);
        return 0;
    } catch (...) {
        return fail(err, "build");
    }
}

int donto_ann_build_file(donto_vecfile *v, const donto_ann_opts *o, donto_ann **out, donto_err *err) {
    *out = nullptr;
    int dim = donto_vecfile_dim(v);
    size_t n = donto_vecfile_n(v), d = static_cast<size_t>(dim);
    try {
        std::string kind = o && o->kind ? o->kind : DONTO_ANN_DEFAULT_KIND;
        if (kind == "auto") kind = choose(n, dim, o, nullptr);
        std::unique_ptr<faiss::Index> idx = make_index(dim, kind);
        const float *rows = donto_vecfile_rows(v);
        with_threads(o ? o->threads : 0, [&] {
            if (!idx->is_trained) {
                if (n == 0) throw std::runtime_error(kind + " needs training data and none was given");
                // An evenly spaced sample: 64 per list (what k-means uses
                // anyway), at least 65,536 for a PQ's own k-means.
                auto *ivf = faiss::ivflib::try_extract_index_ivf(idx.get());
                size_t want = ivf ? std::max<size_t>(ivf->nlist * 64, 65536) : n;
                if (want > n) want = n;
                std::vector<float> sample(want * d);
                size_t dropped = 0;  // drop the pages read as we go: a strided
                                     // sample touches nearly every page
                for (size_t i = 0; i < want; i++) {
                    size_t r = static_cast<size_t>(static_cast<double>(i) * static_cast<double>(n) / static_cast<double>(want));
                    std::memcpy(sample.data() + i * d, rows + r * d, d * sizeof(float));
                    if (r >= dropped + 65536) {
                        donto_vecfile_drop(v, dropped, r - dropped);
                        dropped = r;
                    }
                }
                donto_vecfile_drop(v, 0, n);
                progress(o, "train", 0, want);
                train(idx.get(), want, sample.data());
                progress(o, "train", want, want);
            }
            const size_t chunk = 65536;
            progress(o, "add", 0, n);
            for (size_t at = 0; at < n; at += chunk) {
                size_t m = std::min(chunk, n - at);
                idx->add(static_cast<faiss::Index::idx_t>(m), rows + at * d);
                donto_vecfile_drop(v, at, m);
                progress(o, "add", at + m, n);
            }
        });
        donto_ann *a = wrap(std::move(idx), o);
        if (lossy(a->idx.get())) a->rows = v;
        *out = a;
        return 0;
    } catch (...) {
        return fail(err, "build");
    }
}

int donto_ann_attach(donto_ann *a, const donto_vecfile *v, donto_err *err) {
    if (v && (donto_vecfile_dim(v) != a->idx->d || donto_vecfile_n(v) < static_cast<size_t>(a->idx->ntotal)))
        return donto_seterr(err, "ann: the vector file holds %zu %d-d rows; the index %lld %d-d", donto_vecfile_n(v),
                            donto_vecfile_dim(v), static_cast<long long>(a->idx->ntotal), static_cast<int>(a->idx->d));
    a->rows = v;
    return 0;
}

int donto_ann_lossy(const donto_ann *a) {
    try {
        return a && lossy(a->idx.get());
    } catch (...) {
        return 0;
    }
}

int donto_ann_stale(const donto_ann *a, size_t n, const donto_ann_opts *o) {
    try {
        std::string k = o && o->kind ? o->kind : DONTO_ANN_DEFAULT_KIND;
        size_t bound = o && o->memory_gb > 0 ? static_cast<size_t>(o->memory_gb * 1e9) : 0;
        if (k != "auto") return 0;
        size_t nl, want_nl;
        std::string have = codec_of(a->idx.get(), &nl);
        std::string want = choose(n, static_cast<int>(a->idx->d), o, nullptr);
        std::string want_codec = want == "Flat" ? "Flat" : want.substr(want.find(',') + 1);
        want_nl = auto_nlist(n);
        if (bound && estimate(n, static_cast<int>(a->idx->d), nl, have) > bound) return 1;
        if (want_codec != have) return 1;
        return want_nl >= 2 * std::max<size_t>(nl, 1) ? 1 : 0;
    } catch (...) {
        return 1;  // nothing fits any more: rebuilding reports why
    }
}

size_t donto_ann_memory(const donto_ann *a) {
    try {
        size_t nl;
        std::string c = codec_of(a->idx.get(), &nl);
        size_t n = static_cast<size_t>(a->idx->ntotal);
        if (c == "HNSW") return n * (4 * static_cast<size_t>(a->idx->d) + 2 * 32 * 4 + 16);
        return estimate(n, static_cast<int>(a->idx->d), nl, c);
    } catch (...) {
        return 0;
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
        if (a->rows && a->rerank > k) {
            size_t kc = a->rerank;
            std::vector<float> cs(nq * kc);
            std::vector<faiss::Index::idx_t> cl(nq * kc);
            index_search(a->idx.get(), nq, q, kc, cs.data(), cl.data());
            rerank(a, q, nq, kc, reinterpret_cast<const int64_t *>(cl.data()), k, scores, labels);
            return 0;
        }
        index_search(a->idx.get(), nq, q, k, scores, reinterpret_cast<faiss::Index::idx_t *>(labels));
        if (a->rows) {  // lossy, rerank <= k: still give exact scores
            std::vector<int64_t> c(labels, labels + nq * k);
            rerank(a, q, nq, k, c.data(), k, scores, labels);
        }
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
        donto_ann_opts o;
        donto_ann_default_opts(&o);
        o.search = params;
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
                        *out = wrap(std::move(idx), o);
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
    try {
        size_t nl;
        std::string codec = codec_of(a->idx.get(), &nl);
        if (auto *h = dynamic_cast<const faiss::IndexHNSW *>(a->idx.get()))
            d = "HNSW" + std::to_string(h->hnsw.nb_neighbors(1)) + ",Flat efSearch=" + std::to_string(h->hnsw.efSearch);
        else if (auto *ivf = faiss::ivflib::try_extract_index_ivf(a->idx.get()))
            d = "IVF" + std::to_string(ivf->nlist) + "," + codec + " nprobe=" + std::to_string(ivf->nprobe);
        if (lossy(a->idx.get()))
            d += a->rows ? " rerank=" + std::to_string(a->rerank) : std::string(" (no re-rank rows)");
    } catch (...) {
    }
    std::snprintf(buf, cap, "%s", d.c_str());
}

size_t donto_ann_ntotal(const donto_ann *a) { return a ? static_cast<size_t>(a->idx->ntotal) : 0; }
int donto_ann_dim(const donto_ann *a) { return a ? static_cast<int>(a->idx->d) : 0; }
void donto_ann_free(donto_ann *a) { delete a; }

}  // extern "C"
