"""Run the test suite against an AddressSanitizer + UndefinedBehaviorSanitizer build of every variant.

    python tools/sanitize.py [--dir DIR] [--sanitizers "address;undefined"] [-- PYTEST ARGS...]

1. Builds every variant of this architecture with CMake's -DQSDPA_SANITIZE (CMakeLists.txt) into
   DIR/build, and checks that each module really carries ASan and UBSan instrumentation.
2. Lays out an importable package DIR/tree/qsdpa (the repo's Python sources + the sanitized modules).
3. Self-test: a tiny sanitized canary library must produce a report for each kind of bug we count
   on catching (heap overflow, use after free, a leak, signed overflow) under exactly the runtime
   options below, so "zero reports" cannot mean "reports switched off".
4. Runs pytest on the repo's tests with libasan preloaded (the interpreter is not ASan-built) and the
   reports written to DIR/reports, from every process, children included. Fails if pytest fails or
   any report was written. LeakSanitizer is on; its suppressions (tools/lsan-python.supp) name
   CPython's own start-up/shut-down allocation sites only, and a leak report with a frame in a qsdpa
   module fails the run whatever the suppressions say (print_suppressions shows what was hidden).

Needs a GCC or Clang with the sanitizer runtimes, CMake and the test deps; see docs/reliability.md.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from typing import Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
SUPPRESSIONS = ROOT / "tools" / "lsan-python.supp"
REPORT_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                  "ERROR: UndefinedBehaviorSanitizer")


def _cxx(build: pathlib.Path) -> str:
    cache = (build / "CMakeCache.txt").read_text()
    m = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.+)$", cache, re.M)
    return m.group(1).strip() if m else (os.environ.get("CXX") or "c++")


def build(build_dir: pathlib.Path, sanitizers: str) -> List[pathlib.Path]:
    import pybind11

    cache = build_dir / "CMakeCache.txt"
    if cache.exists() and f"CMAKE_HOME_DIRECTORY:INTERNAL={ROOT}" not in cache.read_text():
        shutil.rmtree(build_dir)  # configured for another checkout
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), *gen, f"-DQSDPA_SANITIZE={sanitizers}",
                    "-DCMAKE_BUILD_TYPE=RelWithDebInfo",  # not stripped; the registry's -O3 still applies
                    f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 1)], check=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    mods = sorted(build_dir.glob(f"_kernels_*{suffix}"))
    if not mods:
        raise SystemExit(f"no _kernels_*{suffix} in {build_dir}")
    entry = build_dir / f"_entry{suffix}"  # qsdpa.quantized_sdpa's C level (csrc/public_entry.cpp)
    if not entry.exists():
        raise SystemExit(f"no {entry.name} in {build_dir}")
    return mods + [entry]


def undefined_symbols(lib: pathlib.Path) -> str:
    return subprocess.run(["nm", "-D", "--undefined-only", str(lib)], check=True, capture_output=True, text=True).stdout


def check_instrumented(mods: List[pathlib.Path], sanitizers: str) -> None:
    """A module built without the flags would pass every test and prove nothing."""
    want = {"address": "__asan_report_", "undefined": "__ubsan_handle_"}
    for mod in mods:
        syms = undefined_symbols(mod)
        for san in sanitizers.split(";"):
            if san in want and want[san] not in syms:
                raise SystemExit(f"{mod.name}: no {want[san]}* references: not built with -fsanitize={san}")
        print(f"instrumented: {mod.name} ({sanitizers})")


def make_tree(tree: pathlib.Path, mods: List[pathlib.Path]) -> None:
    if tree.exists():
        shutil.rmtree(tree)
    pkg = tree / "qsdpa"
    pkg.mkdir(parents=True)
    for src in (ROOT / "qsdpa").glob("*.py"):
        shutil.copy2(src, pkg / src.name)
    for mod in mods:
        shutil.copy2(mod, pkg / mod.name)
    # An editable install of qsdpa puts an import hook in front of sys.path; drop it so the
    # sanitized tree is what `import qsdpa` finds, in this process and in every child.
    (tree / "sitecustomize.py").write_text(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path\n"
        "                    if 'qsdpa' not in getattr(f, 'known_source_files', {}).get('qsdpa', '')\n"
        "                    and 'qsdpa' not in repr(getattr(f, 'known_wheel_files', ''))]\n")


def runtime_env(build_dir: pathlib.Path, tree: pathlib.Path, reports: pathlib.Path) -> Dict[str, str]:
    cxx = _cxx(build_dir)
    def runtime(name: str) -> str:
        path = subprocess.run([cxx, f"-print-file-name={name}"], check=True, capture_output=True,
                              text=True).stdout.strip()
        if not os.path.isabs(path):
            raise SystemExit(f"{cxx} has no {name}")
        return path

    log = reports / "report"
    env = dict(os.environ)
    env.update(
        # ASan's runtime must be the first library of a non-ASan python; libstdc++ too, or ASan's
        # __cxa_throw interceptor aborts on the first C++ exception (python is not linked with it).
        LD_PRELOAD=" ".join([runtime("libasan.so"), runtime("libstdc++.so")]),
        PYTHONPATH=os.pathsep.join([str(tree)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
        # pymalloc hands out pieces of big arenas: through malloc, ASan sees every Python object too.
        PYTHONMALLOC="malloc",
        # allocator_may_return_null: numpy must get NULL (MemoryError) for absurd sizes the bad-input
        # fuzz asks for, instead of ASan aborting on them.
        # intercept_tls_get_addr=0: GCC <= 13's runtime takes a dynamic TLS block whose address is
        # 16 mod 4096 for a pre-2.25 glibc one and reads a garbage range from before it; at exit
        # LeakSanitizer's tracer then dies on it ("Tracer caught signal 11", "DTLS 6 at
        # 0x2bf1-0x800003cf3" with log_threads=1) and the process aborts with no report. Whether a
        # block lands there depends on the malloc layout, so it came and went with unrelated
        # changes (google/sanitizers#1322). Without the interceptor LeakSanitizer does not scan
        # dynamically allocated TLS, which nothing of ours uses.
        ASAN_OPTIONS=":".join([f"log_path={log}", "detect_leaks=1", "halt_on_error=1", "abort_on_error=1",
                               "allocator_may_return_null=1", "detect_stack_use_after_return=1",
                               "strict_init_order=1", "check_initialization_order=1", "handle_segv=1",
                               "handle_abort=1", "intercept_tls_get_addr=0"]),
        LSAN_OPTIONS=":".join([f"suppressions={SUPPRESSIONS}", "print_suppressions=1", "report_objects=0"]),
        UBSAN_OPTIONS=":".join([f"log_path={log}", "halt_on_error=1", "abort_on_error=1", "print_stacktrace=1"]),
        QSDPA_SANITIZED="1",  # tests that need their own malloc interposer skip, saying why
    )
    return env


def collect_reports(reports: pathlib.Path) -> List[str]:
    """Report files with a real finding; a leak with a qsdpa frame counts even if suppressed."""
    bad = []
    for f in sorted(reports.glob("report*")):
        text = f.read_text(errors="replace")
        if any(m in text for m in REPORT_MARKERS) or "_kernels_" in text or "qsdpa/_entry" in text:
            bad.append(f"{f}:\n{text}")
    return bad


CANARY = r"""
#include <cstdlib>
#include <cstring>
#include <climits>
extern "C" {
int heap_overflow(int n) { char* p = static_cast<char*>(std::malloc(n)); int r = p[n]; std::free(p); return r; }
int use_after_free(int i) { int* p = static_cast<int*>(std::malloc(16)); std::free(p); return p[i]; }
void* leak(int n) { void* p = std::malloc(static_cast<size_t>(n)); std::memset(p, 1, n); return nullptr; }
int signed_overflow(int x) { return x + INT_MAX; }
}
"""


def self_test(build_dir: pathlib.Path, env: Dict[str, str], work: pathlib.Path, sanitizers: str) -> None:
    """Each injected bug must be reported under these options; otherwise the run proves nothing."""
    src = work / "canary.cpp"
    lib = work / "libcanary.so"
    src.write_text(CANARY)
    flags = ["-fsanitize=" + sanitizers.replace(";", ","), "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
             "-g", "-O1"]
    subprocess.run([_cxx(build_dir), "-shared", "-fPIC", *flags, "-o", str(lib), str(src)], check=True)
    cases = {"heap_overflow(8)": "heap-buffer-overflow", "use_after_free(1)": "heap-use-after-free",
             "leak(4096)": "detected memory leaks", "signed_overflow(1)": "signed integer overflow"}
    for call, expect in cases.items():
        if ("address" not in sanitizers and expect != "signed integer overflow") or \
                ("undefined" not in sanitizers and expect == "signed integer overflow"):
            continue
        reports = work / f"canary-{call.split('(')[0]}"
        shutil.rmtree(reports, ignore_errors=True)
        reports.mkdir()
        cenv = dict(env)
        for key in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            cenv[key] = re.sub(r"log_path=[^:]*", f"log_path={reports}/report", cenv[key])
        fn = call.split("(")[0]
        code = f"import ctypes; lib = ctypes.CDLL({str(lib)!r}); lib.{fn}.restype = ctypes.c_int; lib.{call}"
        proc = subprocess.run([sys.executable, "-c", code], env=cenv, capture_output=True, text=True, timeout=120)
        found = collect_reports(reports)
        # UBSan (a separate runtime when preloaded beside ASan) may print to stderr despite log_path;
        # its abort then leaves an ASan "ABRT" report in the log directory, which the suite run counts.
        ok = proc.returncode != 0 and bool(found) and any(expect in r for r in found + [proc.stderr])
        print(f"self-test: {call:<20} rc={proc.returncode:<4} report {'found' if ok else 'MISSING'}: {expect}")
        if not ok:
            raise SystemExit(f"sanitizer self-test failed for {call}: rc={proc.returncode}\n{proc.stderr}\n{found}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_dir = pathlib.Path(os.environ.get("QSDPA_CI_DIR", os.environ.get("TMPDIR", "/tmp") + "/qsdpa-sanitize"))
    ap.add_argument("--dir", type=pathlib.Path, default=default_dir / "sanitize",
                    help="build tree, package tree and reports (default: %(default)s)")
    ap.add_argument("--sanitizers", default="address;undefined")
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to pytest (default: the whole tests/ suite)")
    args = ap.parse_args()
    work = args.dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    mods = build(work / "build", args.sanitizers)
    check_instrumented(mods, args.sanitizers)
    make_tree(work / "tree", mods)
    reports = work / "reports"
    shutil.rmtree(reports, ignore_errors=True)
    reports.mkdir()
    env = runtime_env(work / "build", work / "tree", reports)
    self_test(work / "build", env, work, args.sanitizers)
    where = subprocess.run([sys.executable, "-c", "import qsdpa, qsdpa._kernels_scalar as s; print(s.__file__)"],
                           env=env, capture_output=True, text=True, cwd=work)
    if where.returncode != 0 or not where.stdout.strip().startswith(str(work / "tree")):
        raise SystemExit(f"the sanitized tree is not what `import qsdpa` finds: {where.stdout}{where.stderr}")
    print(f"build + checks: {time.monotonic() - t0:.0f}s; qsdpa from {work / 'tree'}")
    pytest_args = args.pytest_args or [str(ROOT / "tests")]
    t1 = time.monotonic()
    rc = subprocess.run([sys.executable, "-m", "pytest", *pytest_args], env=env,
                        cwd=work).returncode
    found = collect_reports(reports)
    for r in found:
        print(r)
    suppressed = sum(f.read_text(errors="replace").count("Suppressions used") for f in reports.glob("report*"))
    print(f"sanitizer run: pytest exit {rc}, {len(found)} report file(s) with findings, "
          f"{suppressed} process(es) with interpreter-only leaks suppressed, {time.monotonic() - t1:.0f}s")
    if found:
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
