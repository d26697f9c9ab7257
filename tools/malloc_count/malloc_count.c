/* malloc_count: an LD_PRELOAD shim that counts heap allocations and says whose code made them.
 *
 * Interposes malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign, valloc, pvalloc and
 * every C++ operator new / new[] of the Itanium ABI (plain, nothrow, aligned, aligned + nothrow),
 * forwards each to the real one (dlsym(RTLD_NEXT), or libstdc++ itself when it was loaded
 * RTLD_LOCAL behind a Python extension), and - while counting is enabled - attributes it twice:
 *
 *   immediate   the shared object of the immediate caller (__builtin_return_address(0) + dladdr);
 *   attributed  the first caller up the stack that is not allocator plumbing (libc, libstdc++,
 *               libgcc_s, ld.so, this shim): a std::string built in qsdpa's code allocates from
 *               libstdc++'s out-of-line basic_string::_M_create, and is charged to qsdpa here.
 *
 * plus "on_stack": allocations with a qsdpa/_kernels_* frame anywhere in the first MC_FRAMES
 * frames (this includes Python objects that pybind11 code in qsdpa asks the interpreter for).
 * Buckets are listed in bucket_names[]. For allocations charged to qsdpa or libgomp it also keeps
 * the call sites (the attributed return address and three callers above it, with counts and
 * bytes) so they can be symbolised afterwards.
 *
 * An allocation made while a hook is already running on the thread (dladdr, the unwinder, the real
 * operator new calling malloc) is forwarded uncounted: one count per allocation the program asked
 * for. Nothing in a hook allocates itself. dlsym's own calloc during bootstrap is served from a
 * static buffer.
 *
 * Read from Python with ctypes.CDLL(path) on the preloaded library (same handle):
 *   malloc_count_enable(int), malloc_count_reset(), malloc_count_nbuckets(),
 *   malloc_count_bucket_name(i), malloc_count_read(kind, out[nbuckets]) with kind 0 immediate /
 *   1 attributed / 2 bytes (attributed), malloc_count_total(), malloc_count_on_stack(),
 *   malloc_count_sites(buckets, ips, counts, bytes, n).
 *
 * Build: cc -shared -fPIC -O2 -o libmalloc_count.so malloc_count.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))

enum {
  B_OTHER, B_QSDPA, B_LIBGOMP, B_LIBSTDCXX, B_LIBC, B_LIBGCC, B_LDSO, B_PYTHON, B_NUMPY, B_SHIM, NBUCKETS
};
static const char* const bucket_names[NBUCKETS] = {"other", "qsdpa", "libgomp", "libstdc++", "libc", "libgcc_s",
                                                   "ld.so", "python", "numpy", "malloc_count"};

static int is_plumbing(int b) { return b == B_LIBC || b == B_LIBSTDCXX || b == B_LIBGCC || b == B_LDSO || b == B_SHIM; }

/* ---- real functions ---------------------------------------------------------------------- */
typedef void* (*malloc_fn)(size_t);
typedef void* (*calloc_fn)(size_t, size_t);
typedef void* (*realloc_fn)(void*, size_t);
typedef void (*free_fn)(void*);
typedef void* (*memalign_fn)(size_t, size_t);
typedef int (*posix_memalign_fn)(void**, size_t, size_t);
typedef void* (*valloc_fn)(size_t);
typedef void* (*new_fn)(size_t);
typedef void* (*new_nt_fn)(size_t, const void*);
typedef void* (*new_al_fn)(size_t, size_t);
typedef void* (*new_al_nt_fn)(size_t, size_t, const void*);

static malloc_fn real_malloc;
static calloc_fn real_calloc;
static realloc_fn real_realloc;
static free_fn real_free;
static memalign_fn real_memalign;
static memalign_fn real_aligned_alloc;
static posix_memalign_fn real_posix_memalign;
static valloc_fn real_valloc;
static valloc_fn real_pvalloc;

/* Bootstrap: dlsym may calloc before real_calloc is known. */
static char boot_buf[16384] __attribute__((aligned(64)));
static size_t boot_used;
static int resolving;

static void* boot_alloc(size_t n) {
  size_t off = (boot_used + 15) & ~(size_t)15;
  if (off + n > sizeof boot_buf) return NULL;
  boot_used = off + n;
  memset(boot_buf + off, 0, n);
  return boot_buf + off;
}
static int is_boot(const void* p) { return (const char*)p >= boot_buf && (const char*)p < boot_buf + sizeof boot_buf; }

static void resolve(void) {
  if (real_malloc || resolving) return;
  resolving = 1;
  real_calloc = (calloc_fn)dlsym(RTLD_NEXT, "calloc");
  real_realloc = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
  real_free = (free_fn)dlsym(RTLD_NEXT, "free");
  real_memalign = (memalign_fn)dlsym(RTLD_NEXT, "memalign");
  real_aligned_alloc = (memalign_fn)dlsym(RTLD_NEXT, "aligned_alloc");
  real_posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
  real_valloc = (valloc_fn)dlsym(RTLD_NEXT, "valloc");
  real_pvalloc = (valloc_fn)dlsym(RTLD_NEXT, "pvalloc");
  real_malloc = (malloc_fn)dlsym(RTLD_NEXT, "malloc"); /* last: it marks the end of bootstrap */
  resolving = 0;
}

/* C++ operator new: libstdc++ is usually loaded later, RTLD_LOCAL behind an extension module, where
 * RTLD_NEXT cannot see it; then ask the already-loaded library itself. */
static void* cxx_sym(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p) return p;
  static const char* const libs[] = {"libstdc++.so.6", "libc++.so.1"};
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; ++i) {
    void* h = dlopen(libs[i], RTLD_LAZY | RTLD_NOLOAD);
    if (!h) continue;
    p = dlsym(h, name);
    dlclose(h);
    if (p) return p;
  }
  return NULL;
}

/* ---- counters ------------------------------------------------------------------------------ */
static int enabled;
static unsigned long long total;
static unsigned long long immediate[NBUCKETS], attributed[NBUCKETS], attributed_bytes[NBUCKETS];
static unsigned long long on_stack;
static TLS int in_hook;

#define MC_SITES 256
#define MC_SITE_FRAMES 4
struct site {
  int bucket;                       /* B_QSDPA or B_LIBGOMP */
  uintptr_t ip[MC_SITE_FRAMES];     /* the attributed frame and the ones above it */
  unsigned long long count, bytes;
};
static struct site sites[MC_SITES];
static int nsites;
static char sites_lock;
#define CACHE_SIZE 8192
static uint64_t cache[CACHE_SIZE]; /* (address << 8) | (bucket + 1); one word, so no torn reads */

static int bucket_of_name(const char* path) {
  if (!path) return B_OTHER;
  const char* base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (strncmp(base, "_kernels_", 9) == 0 && strstr(path, "qsdpa")) return B_QSDPA;
  if (strncmp(base, "libgomp", 7) == 0) return B_LIBGOMP;
  if (strncmp(base, "libstdc++", 9) == 0 || strncmp(base, "libc++", 6) == 0) return B_LIBSTDCXX;
  if (strncmp(base, "libc.so", 7) == 0 || strncmp(base, "libc-", 5) == 0) return B_LIBC;
  if (strncmp(base, "libgcc_s", 8) == 0) return B_LIBGCC;
  if (strncmp(base, "ld-linux", 8) == 0 || strncmp(base, "ld64", 4) == 0) return B_LDSO;
  if (strncmp(base, "libmalloc_count", 15) == 0) return B_SHIM;
  if (strncmp(base, "libpython", 9) == 0 || strncmp(base, "python", 6) == 0) return B_PYTHON;
  if (strstr(path, "/numpy/") || strstr(path, "/numpy.libs/")) return B_NUMPY;
  return B_OTHER;
}

static int bucket_of(const void* addr) {
  uint64_t a = (uint64_t)(uintptr_t)addr;
  size_t slot = (size_t)((a ^ (a >> 13)) * 0x9E3779B97F4A7C15ull >> 51) & (CACHE_SIZE - 1);
  uint64_t e = __atomic_load_n(&cache[slot], __ATOMIC_RELAXED);
  if (e && (e >> 8) == (a & 0x00FFFFFFFFFFFFFFull)) return (int)(e & 0xff) - 1;
  Dl_info info;
  int b = (addr && dladdr(addr, &info)) ? bucket_of_name(info.dli_fname) : B_OTHER;
  if (a < (1ull << 56)) __atomic_store_n(&cache[slot], (a << 8) | (uint64_t)(b + 1), __ATOMIC_RELAXED);
  return b;
}

static void add_site(int bucket, void* const* frames, int nframes, size_t n) {
  uintptr_t ip[MC_SITE_FRAMES] = {0};
  for (int i = 0; i < MC_SITE_FRAMES && i < nframes; ++i) ip[i] = (uintptr_t)frames[i];
  while (__atomic_test_and_set(&sites_lock, __ATOMIC_ACQUIRE)) {
  }
  int i = 0;
  for (; i < nsites; ++i)
    if (sites[i].bucket == bucket && memcmp(sites[i].ip, ip, sizeof ip) == 0) break;
  if (i == nsites && nsites < MC_SITES) {
    sites[i].bucket = bucket;
    memcpy(sites[i].ip, ip, sizeof ip);
    sites[i].count = sites[i].bytes = 0;
    ++nsites;
  }
  if (i < nsites) {
    sites[i].count += 1;
    sites[i].bytes += n;
  }
  __atomic_clear(&sites_lock, __ATOMIC_RELEASE);
}

#define MC_FRAMES 24

/* Called with in_hook set. */
static void record(void* caller, size_t n) {
  __atomic_fetch_add(&total, 1, __ATOMIC_RELAXED);
  const int imm = bucket_of(caller);
  __atomic_fetch_add(&immediate[imm], 1, __ATOMIC_RELAXED);
  void* frames[MC_FRAMES];
  const int nf = backtrace(frames, MC_FRAMES);
  /* frames[] starts inside this shim; the immediate caller's return address is one of them. */
  int k = 0;
  while (k < nf && frames[k] != caller) ++k;
  int att = imm;
  int att_at = k; /* index in frames[] of the attributed frame (nf: not found) */
  int seen_qsdpa = imm == B_QSDPA;
  if (k < nf) {
    int found = !is_plumbing(imm);
    for (int i = k + 1; i < nf; ++i) {
      const int b = bucket_of(frames[i]);
      if (b == B_QSDPA) seen_qsdpa = 1;
      if (!found && !is_plumbing(b)) {
        found = 1;
        att = b;
        att_at = i;
      }
    }
  }
  __atomic_fetch_add(&attributed[att], 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&attributed_bytes[att], n, __ATOMIC_RELAXED);
  if (att == B_QSDPA || att == B_LIBGOMP) {
    if (att_at < nf) add_site(att, frames + att_at, nf - att_at, n);
    else add_site(att, &caller, 1, n);
  }
  if (seen_qsdpa) __atomic_fetch_add(&on_stack, 1, __ATOMIC_RELAXED);
}

#define COUNT(n)                                                              \
  do {                                                                        \
    if (__atomic_load_n(&enabled, __ATOMIC_RELAXED) && !in_hook) {            \
      in_hook = 1;                                                            \
      record(__builtin_extract_return_addr(__builtin_return_address(0)), (n)); \
      in_hook = 0;                                                            \
    }                                                                         \
  } while (0)

/* ---- C allocation functions ------------------------------------------------------------------ */
EXPORT void* malloc(size_t n) {
  if (!real_malloc) {
    resolve();
    if (!real_malloc) return boot_alloc(n);
  }
  COUNT(n);
  int was = in_hook;
  in_hook = 1;
  void* p = real_malloc(n);
  in_hook = was;
  return p;
}

EXPORT void* calloc(size_t k, size_t n) {
  if (!real_malloc) {
    resolve();
    if (!real_malloc) return (n && k > (size_t)-1 / n) ? NULL : boot_alloc(k * n);
  }
  COUNT(k * n);
  int was = in_hook;
  in_hook = 1;
  void* p = real_calloc(k, n);
  in_hook = was;
  return p;
}

EXPORT void* realloc(void* old, size_t n) {
  if (!real_malloc) resolve();
  if (is_boot(old)) {
    void* p = malloc(n);
    if (p) memcpy(p, old, n < (size_t)(boot_buf + sizeof boot_buf - (char*)old) ? n : (size_t)(boot_buf + sizeof boot_buf - (char*)old));
    return p;
  }
  COUNT(n);
  int was = in_hook;
  in_hook = 1;
  void* p = real_realloc(old, n);
  in_hook = was;
  return p;
}

EXPORT void free(void* p) {
  if (!p || is_boot(p)) return;
  if (!real_free) resolve();
  real_free(p);
}

#define ALIGNED_BODY(call, n)            \
  if (!real_malloc) resolve();           \
  COUNT(n);                              \
  int was = in_hook;                     \
  in_hook = 1;                           \
  void* p = call;                        \
  in_hook = was;                         \
  return p;

EXPORT void* memalign(size_t al, size_t n) { ALIGNED_BODY(real_memalign(al, n), n) }
EXPORT void* aligned_alloc(size_t al, size_t n) { ALIGNED_BODY(real_aligned_alloc(al, n), n) }
EXPORT void* valloc(size_t n) { ALIGNED_BODY(real_valloc(n), n) }
EXPORT void* pvalloc(size_t n) { ALIGNED_BODY(real_pvalloc(n), n) }

EXPORT int posix_memalign(void** out, size_t al, size_t n) {
  if (!real_malloc) resolve();
  COUNT(n);
  int was = in_hook;
  in_hook = 1;
  int rc = real_posix_memalign(out, al, n);
  in_hook = was;
  return rc;
}

/* ---- C++ operator new (Itanium mangling, 64-bit size_t = unsigned long "m") -------------------- */
#define NEW_VARIANT(sym, fntype, params, args, n)          \
  static fntype real_##sym;                                \
  EXPORT void* sym params {                                \
    if (!real_malloc) resolve();                           \
    COUNT(n);                                              \
    int was = in_hook;                                     \
    in_hook = 1;                                           \
    if (!real_##sym) real_##sym = (fntype)cxx_sym(#sym);   \
    /* no C++ runtime found (cannot happen for a caller of \
       operator new): plain malloc, without new_handler */ \
    void* p = real_##sym ? real_##sym args : real_malloc(n); \
    in_hook = was;                                         \
    return p;                                              \
  }

NEW_VARIANT(_Znwm, new_fn, (size_t n), (n), n)
NEW_VARIANT(_Znam, new_fn, (size_t n), (n), n)
NEW_VARIANT(_ZnwmRKSt9nothrow_t, new_nt_fn, (size_t n, const void* t), (n, t), n)
NEW_VARIANT(_ZnamRKSt9nothrow_t, new_nt_fn, (size_t n, const void* t), (n, t), n)
NEW_VARIANT(_ZnwmSt11align_val_t, new_al_fn, (size_t n, size_t al), (n, al), n)
NEW_VARIANT(_ZnamSt11align_val_t, new_al_fn, (size_t n, size_t al), (n, al), n)
NEW_VARIANT(_ZnwmSt11align_val_tRKSt9nothrow_t, new_al_nt_fn, (size_t n, size_t al, const void* t), (n, al, t), n)
NEW_VARIANT(_ZnamSt11align_val_tRKSt9nothrow_t, new_al_nt_fn, (size_t n, size_t al, const void* t), (n, al, t), n)

/* ---- control and read-out ----------------------------------------------------------------------- */
__attribute__((constructor)) static void mc_init(void) {
  resolve();
  /* backtrace() loads libgcc_s on first use: do it now, uncounted, not inside some later hook. */
  in_hook = 1;
  void* f[2];
  backtrace(f, 2);
  in_hook = 0;
}

EXPORT int malloc_count_nbuckets(void) { return NBUCKETS; }
EXPORT const char* malloc_count_bucket_name(int i) { return (i >= 0 && i < NBUCKETS) ? bucket_names[i] : NULL; }

EXPORT void malloc_count_enable(int on) { __atomic_store_n(&enabled, on ? 1 : 0, __ATOMIC_SEQ_CST); }

EXPORT void malloc_count_reset(void) {
  __atomic_store_n(&total, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&on_stack, 0, __ATOMIC_SEQ_CST);
  for (int i = 0; i < NBUCKETS; ++i) {
    __atomic_store_n(&immediate[i], 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&attributed[i], 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&attributed_bytes[i], 0, __ATOMIC_SEQ_CST);
  }
  while (__atomic_test_and_set(&sites_lock, __ATOMIC_ACQUIRE)) {
  }
  nsites = 0;
  __atomic_clear(&sites_lock, __ATOMIC_RELEASE);
}

/* kind 0: immediate-caller counts, 1: attributed counts, 2: attributed bytes. */
EXPORT int malloc_count_read(int kind, unsigned long long* out) {
  const unsigned long long* src = kind == 0 ? immediate : kind == 1 ? attributed : kind == 2 ? attributed_bytes : NULL;
  if (!src) return -1;
  for (int i = 0; i < NBUCKETS; ++i) out[i] = __atomic_load_n(&src[i], __ATOMIC_SEQ_CST);
  return NBUCKETS;
}

EXPORT unsigned long long malloc_count_total(void) { return __atomic_load_n(&total, __ATOMIC_SEQ_CST); }
EXPORT unsigned long long malloc_count_on_stack(void) { return __atomic_load_n(&on_stack, __ATOMIC_SEQ_CST); }

/* Call sites of allocations charged to qsdpa or libgomp: site i has bucket, MC_SITE_FRAMES return
 * addresses (the attributed frame first, then its callers; 0 past the stack's end), count, bytes.
 * Returns how many sites were copied (at most n). */
EXPORT int malloc_count_site_frames(void) { return MC_SITE_FRAMES; }

EXPORT int malloc_count_sites(int* buckets, uintptr_t* ips, unsigned long long* counts, unsigned long long* bytes, int n) {
  while (__atomic_test_and_set(&sites_lock, __ATOMIC_ACQUIRE)) {
  }
  int k = 0;
  for (; k < nsites && k < n; ++k) {
    buckets[k] = sites[k].bucket;
    memcpy(ips + (size_t)k * MC_SITE_FRAMES, sites[k].ip, sizeof sites[k].ip);
    counts[k] = sites[k].count;
    bytes[k] = sites[k].bytes;
  }
  __atomic_clear(&sites_lock, __ATOMIC_RELEASE);
  return k;
}
