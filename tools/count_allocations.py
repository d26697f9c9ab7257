#!/usr/bin/env python3
"""Count heap allocations made by qsdpa.quantized_sdpa(..., out=out) in a decode loop.

Compiles tools/malloc_count/malloc_count.c into a temporary directory, then, for every kernel
variant this CPU can run (QSDPA_ISA=<variant> in each child, so the public dispatcher picks it), runs
a Python child under LD_PRELOAD that builds a llama3-8b-like decode case (B=1, 32 query heads, 8 KV
heads, D=128, 2048 cached tokens, int8 q/k/v from qsdpa.quantize_per_token), warms up, and counts
every malloc/calloc/realloc/memalign/posix_memalign/aligned_alloc/valloc and C++ operator new over
N calls for each thread count (1 and all cores). See docs/allocations.md.

    python tools/count_allocations.py                 # every usable variant, 1000 calls
    python tools/count_allocations.py --variant avx2 --calls 200 --json
    python tools/count_allocations.py --debug-so-dir DIR   # symbolise qsdpa call sites with an
                                                           # unstripped build of the same code
    python tools/count_allocations.py --ltrace        # cross-check with ltrace (slow)

Exit status: 0 when no allocation is charged to a qsdpa module or to libgomp and the scratch arena
did not grow during the counted calls; 1 otherwise; 2 when the shim cannot be built or preloaded.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM_SOURCE = os.path.join(HERE, "malloc_count", "malloc_count.c")
SHIM_NAME = "libmalloc_count.so"

# The llama3-8b decode shape.
B, HQ, HKV, D, TOKENS = 1, 32, 8, 128, 2048


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------
def find_compiler() -> Optional[str]:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return shutil.which(cc)
    return None


def build_shim(out_dir: str, compiler: Optional[str] = None) -> str:
    """Compile the shim into out_dir; returns the .so path. Raises RuntimeError on failure."""
    cc = compiler or find_compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc/clang) on PATH")
    so = os.path.join(out_dir, SHIM_NAME)
    cmd = [cc, "-shared", "-fPIC", "-O2", "-o", so, SHIM_SOURCE, "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return so


def usable_variants() -> List[str]:
    """Variants this machine can run, lowest rank first (imports only the scalar module)."""
    from qsdpa import _dispatch

    return [s.name for s in reversed(_dispatch.probe().variants) if s.usable]


def run_child(shim: str, variant: Optional[str], calls: int = 1000, threads: Sequence[int] = (), tokens: int = TOKENS,
              warmup: int = 20, timeout: float = 600.0) -> Dict:
    """Run the counting child under LD_PRELOAD=shim; returns its JSON report.

    threads: thread counts to measure (default: 1 and all cores)."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = shim + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    if variant:
        env["QSDPA_ISA"] = variant
    else:
        env.pop("QSDPA_ISA", None)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--shim", shim, "--calls", str(calls),
           "--tokens", str(tokens), "--warmup", str(warmup)]
    if threads:
        cmd += ["--threads", ",".join(str(t) for t in threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _has_symbols(path: str) -> bool:
    """True when the ELF file keeps .symtab or DWARF (a stripped module would only give nonsense names)."""
    readelf = shutil.which("readelf")
    if not readelf:
        return False
    proc = subprocess.run([readelf, "-SW", path], capture_output=True, text=True)
    return proc.returncode == 0 and bool(re.search(r"\s(\.symtab|\.debug_info)\s", proc.stdout))


def _short(name: str) -> str:
    """A C++ name without template arguments and parameter lists."""
    out, depth = [], 0
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out).replace("std::__cxx11::", "std::").replace(" [clone .constprop.0]", "").strip()


_OWN_SOURCES = ("/csrc/", "/generated/", "/templates/", "/qsdpa-")  # qsdpa's own C++ (any checkout or build tree)


def _addr2line(path: str, offset: int) -> Optional[List[tuple]]:
    """[(function, source path:line)] innermost inlined first, for the call before return address offset."""
    addr2line = shutil.which("addr2line")
    if not addr2line or not _has_symbols(path):
        return None
    proc = subprocess.run([addr2line, "-f", "-C", "-i", "-e", path, hex(offset - 1)], capture_output=True, text=True)
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines or lines[0] == "??":
        return None
    return [(lines[i], lines[i + 1].split(" (discriminator")[0]) for i in range(0, len(lines) - 1, 2)]


def _module_path(frame: Dict, debug_dir: Optional[str]) -> Optional[str]:
    path = frame.get("file")
    if path and debug_dir:
        candidate = os.path.join(debug_dir, os.path.basename(path))
        if os.path.exists(candidate):
            return candidate
    return path


def describe_frame(frame: Dict, debug_dir: Optional[str]) -> str:
    """'function (file:line) [innermost inlined callee]' when symbols are at hand, else module+offset."""
    path = _module_path(frame, debug_dir)
    if not path:
        return hex(frame["offset"])
    chain = _addr2line(path, frame["offset"])
    if chain:
        func, loc = chain[-1]
        text = f"{_short(func)} ({os.path.basename(loc)})"
        if len(chain) > 1:
            text += f" [{_short(chain[0][0])}]"
        return text
    base = os.path.basename(frame["file"]).split(".cpython")[0]
    if frame.get("symbol"):
        return f"{base}:{frame['symbol']}+{hex(frame['symbol_offset'] or 0)}"
    return f"{base}+{hex(frame['offset'])}"


def origin(site: Dict, debug_dir: Optional[str]) -> Optional[str]:
    """'file:line (function)' of the innermost line of qsdpa's own C++ (csrc/, generated/) on the site's
    stack, else of the innermost symbolised line of a qsdpa module (e.g. a pybind11 header)."""
    fallback = None
    for frame in site["frames"]:
        if "_kernels_" not in os.path.basename(frame.get("file") or ""):
            continue
        path = _module_path(frame, debug_dir)
        for func, loc in _addr2line(path, frame["offset"]) or []:
            text = f"{os.path.basename(loc)} ({_short(func)})"
            if any(part in loc for part in _OWN_SOURCES):
                return text
            if "/pybind11/" in loc and (fallback is None or "/pybind11/" not in fallback[1]):
                fallback = (text, loc)
            fallback = fallback or (text, loc)
    return fallback[0] if fallback else None


def symbolize(sites: List[Dict], debug_dir: Optional[str]) -> None:
    """Adds 'where' (one description per frame, attributed frame first) and 'origin' to each site.

    Names need an unstripped module: the installed one, or one of the same name in debug_dir built
    from the same sources with the same flags plus -g (its .text is then byte-identical)."""
    for site in sites:
        site["where"] = [describe_frame(f, debug_dir) for f in site["frames"]]
        site["origin"] = origin(site, debug_dir)


def verdict(report: Dict) -> bool:
    """True when every measured thread count meets the requirement."""
    return all(r["attributed"]["qsdpa"] == 0 and r["immediate"]["qsdpa"] == 0 and r["attributed"]["libgomp"] == 0
               and r["immediate"]["libgomp"] == 0 and r["arena_growths_delta"] == 0 for r in report["runs"])


def print_report(report: Dict, calls: int, verbose: bool = False) -> None:
    print(f"variant {report['variant']} (QSDPA_ISA={report['requested'] or 'unset'}), shape B={report['shape'][0]} "
          f"Hq={report['shape'][1]} Hkv={report['shape'][2]} D={report['shape'][3]} tokens={report['shape'][4]}, "
          f"{calls} calls per thread count; shim self-test: {report['self_test']} allocations seen, positive control "
          f"(a call that raises in C++): {report['positive_control']} charged to qsdpa")
    print(f"  {'threads':>7} {'total':>7} {'qsdpa':>6} {'qsdpa*':>6} {'gomp':>5} {'on-stack':>8} {'arena':>5}  other buckets "
          "(attributed)")
    for r in report["runs"]:
        others = ", ".join(f"{k} {v}" for k, v in r["attributed"].items() if v and k not in ("qsdpa", "libgomp"))
        print(f"  {r['threads']:>7} {r['total']:>7} {r['immediate']['qsdpa']:>6} {r['attributed']['qsdpa']:>6} "
              f"{r['attributed']['libgomp']:>5} {r['qsdpa_on_stack']:>8} {r['arena_growths_delta']:>5}  {others}")
        for s in r["sites"]:
            text = s.get("origin") or s["where"][0]
            if verbose:
                text += "".join(f"\n{'':>40}<- {w}" if i else f"\n{'':>40}   {w}" for i, w in enumerate(s["where"]))
            print(f"        {s['bucket']:>8} {s['count'] / calls:6.2f}/call {s['bytes'] / s['count']:6.0f} B  {text}")
    print("  (qsdpa: immediate caller in a qsdpa module; qsdpa*: first caller outside libc/libstdc++/libgcc_s, so a "
          "std::string built by qsdpa counts; on-stack: a qsdpa frame anywhere in the 24 innermost frames, including "
          "Python objects made for pybind11)")


# ---------------------------------------------------------------------------------------------
# ltrace cross-check: count PLT calls to the allocators made from the qsdpa modules and libgomp,
# with 0 and with N decode calls; the difference is what the N calls did.
# ---------------------------------------------------------------------------------------------
LTRACE_C = ("malloc", "calloc", "realloc", "aligned_alloc", "posix_memalign", "memalign", "valloc")
LTRACE_CXX = ("_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t",
              "_ZnamSt11align_val_t")


def _ltrace_counts(lines: Sequence[str]) -> Dict[str, int]:
    """{"<module>-><symbol>(<first argument>)": calls} from ltrace's per-call output."""
    counts: Dict[str, int] = {}
    for line in lines:
        m = re.match(r"\s*(?:\d+\s+)?(\S+?)->(\w+)\(([^,)]*)", line)
        if m:
            lib = m.group(1).split(".cpython")[0].split(".so")[0]
            key = f"{lib}->{m.group(2)}({m.group(3)})"
            counts[key] = counts.get(key, 0) + 1
    return counts


def run_ltrace(variant: Optional[str], calls: int, threads: int, tokens: int) -> Dict:
    """PLT calls to the allocators made from the qsdpa modules and libgomp during `calls` decode calls:
    ltrace runs the child (without the shim) once with 0 and once with `calls` calls; the difference
    is what the calls did. Keys are "module->symbol(first argument)", i.e. the size for malloc/new."""
    ltrace = shutil.which("ltrace")
    if not ltrace:
        raise RuntimeError("ltrace is not installed (apt-get install -y ltrace)")
    # -e sym@lib: calls of sym made through lib's PLT (lib: a glob on the soname or file name). Only
    # direct calls are seen: a std::string's buffer is allocated from libstdc++'s PLT, not qsdpa's.
    rules = "+".join([f"{s}@*_kernels_*" for s in LTRACE_C + LTRACE_CXX] + [f"{s}@libgomp.so*" for s in LTRACE_C])
    counts = {}
    for n in (0, calls):
        env = dict(os.environ)
        if variant:
            env["QSDPA_ISA"] = variant
        with tempfile.NamedTemporaryFile("r", suffix=".ltrace") as out:
            cmd = [ltrace, "-f", "-o", out.name, "-e", rules, sys.executable, os.path.abspath(__file__), "--child",
                   "--calls", str(n), "--tokens", str(tokens), "--threads", str(threads), "--warmup", "5"]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
            counts[n] = _ltrace_counts(out.read().splitlines())
    delta = {k: counts[calls].get(k, 0) - counts[0].get(k, 0) for k in sorted(set(counts[0]) | set(counts[calls]))}
    return {"calls": calls, "threads": threads, "delta": {k: v for k, v in delta.items() if v}}


# ---------------------------------------------------------------------------------------------
# Child side (runs under LD_PRELOAD)
# ---------------------------------------------------------------------------------------------
class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p), ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p)]


def _where(ip: int) -> Dict:
    """{file, offset (from the module's load base), symbol (nearest dynamic symbol), symbol_offset}."""
    libc = ctypes.CDLL(None)
    info = _DlInfo()
    if not libc.dladdr(ctypes.c_void_p(ip), ctypes.byref(info)):
        return {"file": None, "offset": ip, "symbol": None, "symbol_offset": None}
    return {"file": info.dli_fname.decode() if info.dli_fname else None, "offset": ip - (info.dli_fbase or 0),
            "symbol": info.dli_sname.decode() if info.dli_sname else None,
            "symbol_offset": (ip - info.dli_saddr) if info.dli_saddr else None}


def _child(args: argparse.Namespace) -> int:
    import numpy as np

    import qsdpa
    from qsdpa import _dispatch

    lib = None
    if args.shim:
        lib = ctypes.CDLL(args.shim)  # the preloaded copy: dlopen of a loaded path returns its handle
        nb = lib.malloc_count_nbuckets()
        lib.malloc_count_bucket_name.restype = ctypes.c_char_p
        lib.malloc_count_total.restype = ctypes.c_ulonglong
        lib.malloc_count_on_stack.restype = ctypes.c_ulonglong
        names = [lib.malloc_count_bucket_name(i).decode() for i in range(nb)]

        def read(kind):
            buf = (ctypes.c_ulonglong * nb)()
            lib.malloc_count_read(kind, buf)
            return {names[i]: int(buf[i]) for i in range(nb)}

        nframes = lib.malloc_count_site_frames()

        def sites():
            n = 128
            bk = (ctypes.c_int * n)()
            ips = (ctypes.c_size_t * (n * nframes))()
            cnt, byt = (ctypes.c_ulonglong * n)(), (ctypes.c_ulonglong * n)()
            k = lib.malloc_count_sites(bk, ips, cnt, byt, n)
            out = []
            for i in range(k):
                frames = [_where(int(ips[i * nframes + j])) for j in range(nframes) if ips[i * nframes + j]]
                out.append({"bucket": names[bk[i]], "frames": frames, "count": int(cnt[i]), "bytes": int(byt[i])})
            return sorted(out, key=lambda s: (s["bucket"], -s["count"]))

    rng = np.random.default_rng(0)
    q = rng.standard_normal((B, 1, HQ, D), dtype=np.float32)
    k = rng.standard_normal((B, args.tokens, HKV, D), dtype=np.float32)
    v = rng.standard_normal((B, args.tokens, HKV, D), dtype=np.float32)
    q8, qs, qz = qsdpa.quantize_per_token(q)
    k8, ks, kz = qsdpa.quantize_per_token(k)
    v8, vs, vz = qsdpa.quantize_per_token(v)
    out = np.empty(q.shape, np.float32)
    start_pos = args.tokens - 1
    sdpa = qsdpa.quantized_sdpa

    def decode_calls(n):
        for _ in range(n):
            sdpa(q8, k8, v8, start_pos, None, 0.0, True, None, qz, qs, kz, ks, vz, vs, out=out)

    report = {"variant": qsdpa.get_isa(), "requested": os.environ.get("QSDPA_ISA") or None,
              "shape": [B, HQ, HKV, D, args.tokens], "calls": args.calls, "runs": []}
    if args.threads:
        thread_counts = [int(t) for t in args.threads.split(",")]
    else:
        cores = os.cpu_count() or 1
        thread_counts = [1] if cores == 1 else [1, cores]

    if lib is not None:
        # Self-test: the shim is live and this handle is the preloaded one.
        lib.malloc_count_reset()
        lib.malloc_count_enable(1)
        blob = bytearray(1 << 20)
        lib.malloc_count_enable(0)
        del blob
        report["self_test"] = int(lib.malloc_count_total())
        # Positive control: a call the C++ binding rejects builds a std::string message; it must be
        # charged to qsdpa, or a zero below would prove nothing.
        module = _dispatch.selection().module
        bad_key = k8[..., :-1]  # not C-contiguous: rejected in C++ with a message
        lib.malloc_count_reset()
        lib.malloc_count_enable(1)
        try:
            module.quantized_sdpa(q8, qs, qz, bad_key, ks, kz, v8, vs, vz, None, start_pos, True, 1.0, False, out, 1, 0)
        except (TypeError, ValueError):
            pass
        lib.malloc_count_enable(0)
        report["positive_control"] = read(1)["qsdpa"]

    for t in thread_counts:
        qsdpa.set_num_threads(t)
        decode_calls(args.warmup)
        growths0 = qsdpa.arena_stats()["growths"]
        if lib is not None:
            lib.malloc_count_reset()
            lib.malloc_count_enable(1)
        decode_calls(args.calls)
        if lib is not None:
            lib.malloc_count_enable(0)
        run = {"threads": t, "arena_growths_delta": qsdpa.arena_stats()["growths"] - growths0,
               "arena_capacity_bytes": qsdpa.arena_stats()["capacity_bytes"]}
        if lib is not None:
            run.update(total=int(lib.malloc_count_total()), immediate=read(0), attributed=read(1),
                       attributed_bytes=read(2), qsdpa_on_stack=int(lib.malloc_count_on_stack()), sites=sites())
        report["runs"].append(run)
    sys.stdout.flush()
    print(json.dumps(report))
    return 0


# ---------------------------------------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default="all", help="'all' (every usable variant), 'dispatch' (no QSDPA_ISA), or a name")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=TOKENS)
    ap.add_argument("--threads", default="", help="comma-separated thread counts (default: 1 and all cores)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json", action="store_true", help="print the raw reports as JSON")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each allocation site's four innermost frames")
    ap.add_argument("--debug-so-dir", help="directory with unstripped builds of the same modules, to name call sites")
    ap.add_argument("--ltrace", action="store_true", help="also cross-check with ltrace (slow; fewer calls advised)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shim", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args)

    if not sys.platform.startswith("linux"):
        print("LD_PRELOAD counting needs Linux", file=sys.stderr)
        return 2
    variants = usable_variants() if args.variant == "all" else [None] if args.variant == "dispatch" else [args.variant]
    threads = [int(t) for t in args.threads.split(",")] if args.threads else []
    ok = True
    reports = []
    with tempfile.TemporaryDirectory(prefix="malloc_count-") as tmp:
        try:
            shim = build_shim(tmp)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 2
        for variant in variants:
            report = run_child(shim, variant, calls=args.calls, threads=threads, tokens=args.tokens, warmup=args.warmup)
            for r in report["runs"]:
                symbolize(r["sites"], args.debug_so_dir)
            if args.ltrace:
                report["ltrace"] = [run_ltrace(variant, args.calls, t, args.tokens)
                                    for t in ([r["threads"] for r in report["runs"]])]
            reports.append(report)
            ok &= verdict(report)
    if args.json:
        print(json.dumps(reports, indent=1))
    else:
        for report in reports:
            print_report(report, args.calls, args.verbose)
            for lt in report.get("ltrace", []):
                print(f"  ltrace, {lt['threads']} thread(s): allocator calls through the PLT of qsdpa modules and "
                      f"libgomp in {lt['calls']} calls (minus a 0-call run): {lt['delta'] or 'none'}")
        print("PASS: no allocation from qsdpa modules or libgomp, arena unchanged" if ok else
              "FAIL: allocations in qsdpa's decode path (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
