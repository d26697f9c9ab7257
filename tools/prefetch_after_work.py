"""Which decode prefetch setting holds up when other work ran before the call, as in a model?

    python tools/prefetch_after_work.py [--ctx 8192] [--threads 2] [--rounds 25]
        [--before none,mlp,torch,et,faults] [--tunings L2/4,L1/4] [--pages 2m|4k]

A cold llama3-8b decode call (the bench's inputs: layers spanning twice the LLC, on 2 MiB pages)
is timed after one of these, then the bench's pause (_settle: quiet threads, then 5 ms of busy
cores):
  none    nothing (only the previous round's calls, some milliseconds earlier)
  mlp     a model layer's MLP at decode: two fp32 linears of a [1, 4096] activation with 14336 x
          4096 weights (235 MB each), on torch's threads
  torch   PyTorch fp32 SDPA on the same case (the bench's peer)
  et      ExecuTorch's custom_sdpa (fp32), the bench's peer
  faults  268 MB of fresh pages, one store per 4 KiB, freed (page faults and an munmap, nothing read);
          numpy asks for transparent huge pages from 4 MiB up, so these are 2 MiB page faults
          (/proc/vmstat's thp_fault_alloc counts them) where the OS grants them
  faults4k  the same on 4 KiB pages (an anonymous mapping with MADV_NOHUGEPAGE, unmapped)
  faultkeep  the same as faults, each round's pages freed at the start of the next round's
  write   one store per 64-byte line of 268 MB mapped once, up front (dirty lines: no fault, no munmap)
  munmap  256 MB mapped, one store per 2 MiB (128 page faults, little written), unmapped
  read    a 64 MB fp32 sum on torch's threads (a read of memory and nothing else)
  memset  the C library's memset of 268 MB mapped once, up front, on 4 KiB pages (whatever stores
          the library picks at that size; no fault, no munmap)
with each prefetch setting (the kernel's _set_prefetch_tuning: L1/L2 = prefetcht0/prefetcht1,
then the eighths of the next block's K fetched during Q.K^T, 0 to 8; "+walk" walks the pages
first), all interleaved round by round, each round starting one place further along. --pages 4k
puts the layers on 4 KiB pages (the bench's are on 2 MiB pages where the OS grants them). Printed:
the median time per (work before, setting).

On the Zen 5 VM of 2026-12-06 (AMD EPYC family 26 model 2), nothing before, 30 rounds, µs,
L1+walk/8 (Zen 5's setting until then) / L1/8 / L1/4 / L1/0: 2048 keys 234 / 220 / 203 / 209 at 1
thread and 174 / 163 / 156 / 155 at 2; 8192 keys 860 / 793 / 716 / 736 and 544 / 514 / 461 / 484.
On 4 KiB pages, L1+walk/4 / L1/4: 226 / 212, 173 / 170, 842 / 764, 500 / 474. L1/3 to L1/5 level;
L2/4 and L2/2 2-27% slower than L1/4.

On the Zen 4 VM of 2026-12-04 (AMD EPYC family 25 model 17, 2 vCPUs; docs/benchmarks-history.md), medians
in µs, L2/4 (Intel's setting, Zen 4's until then) against L1/4:
  2 threads, 8192 keys: none 746 / 798, mlp 986 / 817, torch 1118 / 824, et 1095 / 818;
                        faults 914 / 871 (and 970 / 847 with 32 MB), read 783 / 844 (in a
                        later run, noisier throughout, none 887 / 1024 and read 1102 / 1017)
  1 thread, 8192 keys:  none 1453 / 1503, mlp 1771 / 1538, torch 1793 / 1512, et 1820 / 1585
  2 threads, 2048 keys: none 337 / 266, mlp 342 / 285, torch 263 / 284, et 355 / 291
  1 thread, 2048 keys:  none 411 / 376, mlp 428 / 407, torch 393 / 397, et 371 / 397
Prefetches into L2 lose up to a third after the peers' calls, a model layer's MLP, or page faults
and an munmap alone (what it is in the hardware was not found; a plain read before the call hurt
them in one run of two); prefetches into L1 take about the same time whatever ran before. Hence Zen 4's setting since then (templates/flash_attention.cpp.j2, PrefetchTuning).

The same VM, 2026-12-04 21:50-21:56 UTC, 8192 keys, 2 threads, 20 rounds, L2/4 / L1/4: none 811 / 874,
faults 1089 / 865, write 800 / 839, faultkeep 1039 / 849, munmap 939 / 833. Dirty lines do not
hurt the prefetches into L2; page faults and unmaps do. In a second run (none, faults, munmap,
torch; L2/4, L2+walk/4, L1/4): none 833 / 865 / 876, faults 1032 / 1043 / 900, munmap 982 / 848 /
896. Walking the pages first restored L2 after the unmap alone, not after the faults. The effect
outlasts a call and a pause, and then fades: with torch in the rounds, L2/4 took 1063 us in the
`none` rows too (889-1063 in every row, L1/4 795-822); with faultkeep last in each round (none,
write, munmap, faultkeep; 12 rounds), none 1092 / 849, write 778 / 833, munmap 824 / 876,
faultkeep 1026 / 850.

The same VM, 2026-12-05 20:44-20:49 UTC, 20 rounds, L2/4 / L1/4: 8192 keys at 2 threads none 893 /
852, torch 1153 / 890, et 1166 / 856, mlp 1182 / 859; three minutes later, level (846-861 /
829-862), as were 8192 keys at 1 thread and 2048 at 1 and 2 (within 5% of each other in every row). Alone in a
process (no peers, no MLP), the bench's pause before each call, L2/4 was 4-10% faster than L1/4.

The same VM, 2026-12-07 02:00-02:15 UTC: what in the page faults does it. The faults rows above were
2 MiB page faults (numpy's huge-page request; 134 a round in thp_fault_alloc). 8192 keys at 2
threads, 20 rounds, L1/4 / L2/4: none 871 / 763, faults 862 / 1155, faults4k 852 / 769, memset
848 / 776, write 880 / 770. At 1 thread (16 rounds) none 1659 / 1370, faults 1703 / 1599, faults4k
1717 / 1393; 2048 keys at 2 threads none 280 / 319, faults 296 / 407, faults4k 297 / 362. With
the layers on 4 KiB pages (--pages 4k) none 877 / 881, faults 917 / 1225. With the VM's free page
reporting off (page_reporting_order 11 for one run: nothing reported) faults 871 / 1156 and torch
876 / 1258. So 2 MiB page faults before the call hurt the prefetches into L2 and 4 KiB ones of
the same 268 MB do not, nor do 268 MB of ordinary, non-temporal or `rep stosb` stores from user
code (a C probe, not kept), nor the host taking memory back. PyTorch's SDPA hurts them too (1428
against 883 in one run) with no 2 MiB faults of its own (0 a call in thp_fault_alloc, as for
ExecuTorch's ops), so that is not the only trigger. (faults4k and memset on an MADV_NOHUGEPAGE
mapping instead of numpy's huge-page request switched off, 12 rounds: none 927 / 821, faults 873 /
1072, faults4k 946 / 813, memset 923 / 831; 0 huge-page faults in faults4k's rounds.)
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from qsdpa import _bench, _dispatch
from qsdpa._bench import SETTLE_S, Case, ThreadClocks, _Inputs, _Peers, _qsdpa_call, _settle
from qsdpa._threads import set_num_threads

TUNINGS = ("L2/4", "L1/4", "L1/0", "L1/8", "L2/0", "L2/8", "L1+walk/8", "L1+walk/4", "L2+walk/4")  # examples


def parse_tuning(name: str):
    """'L1/4' -> (to_l1, walk_pages, eighths of K during Q.K^T): L1 or L2, optional +walk, /0../8."""
    level, _, eighths = name.partition("/")
    walk = level.endswith("+walk")
    level = level[: -len("+walk")] if walk else level
    if level not in ("L1", "L2") or not eighths.isdigit() or not 0 <= int(eighths) <= 8:
        raise SystemExit(f"unknown tuning {name!r}: L1 or L2, optionally +walk, then /0 to /8 (e.g. {', '.join(TUNINGS)})")
    return level == "L1", walk, int(eighths)


def _small_pages(nbytes: int):
    """An anonymous private mapping of nbytes that asks for 4 KiB pages (MADV_NOHUGEPAGE, so also
    where the OS's transparent huge pages are "always"), nothing touched yet."""
    import mmap

    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    return m


def work_before(name: str, case: Case, x: _Inputs, threads: int):
    """fn(i) for the work named, or None for "none"."""
    if name == "none":
        return None
    import torch

    torch.set_num_threads(threads)
    if name == "mlp":
        w1, w2 = torch.randn(14336, 4096) * 0.01, torch.randn(4096, 14336) * 0.01
        act = torch.randn(1, 4096)
        lin = torch.nn.functional.linear
        return lambda i: lin(torch.nn.functional.silu(lin(act, w1)), w2)
    if name == "read":
        bufs = [torch.ones(16 << 20) for _ in range(4)]
        return lambda i: bufs[i % 4].sum()
    if name == "faults":
        def faults(i):
            a = np.empty(67 << 20, np.float32)
            a[::1024] = 1.0
            return a[0]
        return faults
    if name == "faults4k":
        def faults4k(i):
            m = _small_pages(268 << 20)
            a = np.frombuffer(m, np.float32)
            a[::1024] = 1.0
            first = float(a[0])
            del a
            m.close()
            return first
        return faults4k
    if name == "memset":
        import ctypes

        buf = np.frombuffer(_small_pages(268 << 20), np.uint8)  # keeps the mapping alive
        buf[::4096] = 1  # pages committed now, not before a timed call
        memset = ctypes.CDLL(None).memset
        memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
        return lambda i, buf=buf: memset(buf.ctypes.data, i & 0x7F, buf.nbytes)  # buf kept alive
    if name == "faultkeep":
        kept = []

        def faultkeep(i):
            kept.clear()  # the previous round's pages go now
            a = np.empty(67 << 20, np.float32)
            a[::1024] = 1.0
            kept.append(a)
            return a[0]
        return faultkeep
    if name == "write":
        buf = np.ones(67 << 20, np.float32)

        def write(i):
            buf[::16] = float(i)
            return buf[0]
        return write
    if name == "munmap":
        import mmap

        def unmap(i):
            m = mmap.mmap(-1, 256 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            for o in range(0, 256 << 20, 2 << 20):
                m[o] = 1
            m.close()
            return 0
        return unmap
    peers = _Peers()
    fns = peers.callables(case, x)
    key = {"torch": "torch fp32", "et": "ET fp32"}[name]
    if key not in fns:
        raise SystemExit(f"{key} is not installed: {peers.missing.get(key, '')}")
    return fns[key]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ctx", type=int, default=8192, help="cached tokens (llama3-8b decode)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--before", default="none,mlp,torch,et",
                    help="comma-separated: none, mlp, torch, et, faults, faults4k, faultkeep, write, munmap, read, "
                         "memset")
    ap.add_argument("--tunings", default="L2/4,L1/4", help="comma-separated: " + ", ".join(TUNINGS))
    ap.add_argument("--pages", choices=("2m", "4k"), default="2m",
                    help="the layers' pages: 2 MiB where the OS grants them, as the bench's (default), or 4 KiB")
    args = ap.parse_args(argv)

    set_num_threads(args.threads)
    case = Case("llama3-8b", "decode", args.ctx, 1, args.threads, "cold")
    x = _Inputs(case, np.random.default_rng(0), _bench.last_level_cache_bytes())
    if args.pages == "4k":
        x.layers = [_bench.on_huge_pages(layer[:6], huge=False) + layer[6:] for layer in x.layers]
    call = _qsdpa_call(x)
    module = _dispatch.load_variant(_dispatch.get_isa())
    saved = module._prefetch_tuning()
    tunings = args.tunings.split(",")
    for t in tunings:  # before the work's buffers are built (the MLP's weights are 470 MB)
        parse_tuning(t)
    befores = {b: work_before(b, case, x, args.threads) for b in args.before.split(",")}
    order = [(b, t) for b in befores for t in tunings]
    times = {k: [] for k in order}
    clocks = ThreadClocks()
    call(0)
    try:
        with _bench._quiet_stderr():  # ExecuTorch's per-call "No temp allocator provided"
            for r in range(args.rounds):
                turn = order[r % len(order):] + order[:r % len(order)]  # no setting always first
                for j, (b, t) in enumerate(turn):
                    i = r * len(order) + j
                    if befores[b] is not None:
                        befores[b](i % x.n_layers)
                    module._set_prefetch_tuning(*parse_tuning(t))
                    clocks.refresh()
                    _settle(SETTLE_S, args.threads, clocks)
                    t0 = time.perf_counter()
                    call((i + 1) % x.n_layers)
                    times[(b, t)].append(time.perf_counter() - t0)
    finally:
        module._set_prefetch_tuning(**saved)
    print(f"llama3-8b decode, {args.ctx} keys, {args.threads} thread(s), cold, {args.rounds} rounds; "
          f"median µs by the work before the call (rows) and the prefetch setting (columns)")
    print(f"  {'':8s}" + "".join(f"{t:>12s}" for t in tunings))
    for b in befores:
        print(f"  {b:8s}" + "".join(f"{statistics.median(times[(b, t)]) * 1e6:12.0f}" for t in tunings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
