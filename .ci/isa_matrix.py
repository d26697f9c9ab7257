"""Helpers for .ci/run's per-ISA matrix (CI only; stdlib + numpy, runs under qemu-user too).

  python .ci/isa_matrix.py variants ARCH
      the registry's variant names for ARCH (codegen/registry.py, the one registry), space-separated
  python .ci/isa_matrix.py expect ARCH
      the variants this (possibly emulated) CPU can run, from numpy's CPUID / AT_HWCAP detector, which
      is right under qemu-user (py-cpuinfo and /proc/cpuinfo show the host there); best-ranked first
  python .ci/isa_matrix.py simde [FAMILY]
      the SIMDe-emulated variants of tests/emulated (tests/emulated/build.py's emulated_isas: the
      registry's -mavx512f variants, family x86, and its NEON variants, family neon), as their test
      ids name them: avx512~simde ... neon_dotprod~simde; FAMILY (x86 or neon) picks one family
  python .ci/isa_matrix.py count JUNIT_XML LABEL "VARIANTS" "EXPECTED"
      per-variant passed/failed/skipped from a pytest junit file (the variant is the first
      dash-separated token of the test id that names one, e.g. test_qk_gemm[avx2-3-5] or
      [avx512~simde-7]); prints a table, appends rows to $QSDPA_CI_SUMMARY; exits 1 when a variant
      failed, an EXPECTED one passed no test, or one of VARIANTS is absent from the test ids
"""
from __future__ import annotations

import collections
import os
import pathlib
import re
import sys
import xml.etree.ElementTree as ET

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from codegen import registry  # noqa: E402  (registry.py is plain data: no jinja2 needed)

# Canonical feature name (registry spelling) -> numpy's __cpu_features__ key.
_NUMPY_NAME = {"fma": "FMA3", "avx512_vnni": "AVX512VNNI"}


def variants(arch: str) -> list:
    return [isa.name for isa in registry.isas_for_arch(arch)]


def _cpu_features() -> dict:
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_features__
    return __cpu_features__


def expect(arch: str) -> list:
    cpu = _cpu_features()
    ok = [isa for isa in registry.isas_for_arch(arch)
          if all(cpu.get(_NUMPY_NAME.get(f, f.upper()), False) for f in isa.features)]
    return [isa.name for isa in sorted(ok, key=lambda i: -i.rank)]


def simde(family: str = "") -> list:
    import importlib.util  # tests/emulated/build.py holds the one rule for what it builds

    spec = importlib.util.spec_from_file_location("qsdpa_emulated_build", REPO / "tests" / "emulated" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return [f"{isa.name}~simde" for isa in build.emulated_isas() if not family or isa.family == family]


def _variant_of(testcase_name: str, names: set) -> str:
    m = re.search(r"\[(.*)\]$", testcase_name)
    if m:
        for token in m.group(1).split("-"):
            if token in names or token.split("~")[0] in names:
                return token
    return "(other)"


def count(junit: str, label: str, tabulate: list, expected: list) -> int:
    registry_names = {isa.name for isa in registry.ISAS}
    counts = collections.OrderedDict((n, collections.Counter()) for n in tabulate)
    for case in ET.parse(junit).getroot().iter("testcase"):
        v = _variant_of(case.get("name", ""), registry_names)
        c = counts.setdefault(v if v in tabulate else "(other)", collections.Counter())
        if case.find("failure") is not None or case.find("error") is not None:
            c["failed"] += 1
        elif case.find("skipped") is not None:
            c["skipped"] += 1
        else:
            c["passed"] += 1
    bad = []
    rows = []
    print(f"  {'variant':<18} {'passed':>7} {'failed':>7} {'skipped':>8}  expected")
    for v, c in counts.items():
        exp = "run" if v in expected else ("-" if v == "(other)" else "skip")
        status = "ok"
        if c["failed"]:
            status = "FAILED"
        elif exp == "run" and not c["passed"]:
            status = "NOT RUN"   # the CPU has the features, yet not one test of the variant passed
        elif exp == "skip" and not c["skipped"] and not c["passed"]:
            status = "NOT SEEN"  # the variant is absent from the test ids: the parametrisation lost it
        if status != "ok":
            bad.append(f"{label}: {v} {status}")
        print(f"  {v:<18} {c['passed']:>7} {c['failed']:>7} {c['skipped']:>8}  {exp:<5} {status}")
        rows.append(f"{label}|{v}|{c['passed']}|{c['failed']}|{c['skipped']}|{exp}|{status}")
    summary = os.environ.get("QSDPA_CI_SUMMARY")
    if summary:
        with open(summary, "a") as fh:
            fh.write("".join(r + "\n" for r in rows))
    for b in bad:
        print(f"  MATRIX FAILURE: {b}")
    return 1 if bad else 0


def main(argv: list) -> int:
    cmd, rest = argv[0], argv[1:]
    if cmd == "variants":
        print(" ".join(variants(rest[0])))
    elif cmd == "expect":
        print(" ".join(expect(rest[0])))
    elif cmd == "simde":
        print(" ".join(simde(*rest[:1])))
    elif cmd == "count":
        return count(rest[0], rest[1], rest[2].split(), rest[3].split())
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
