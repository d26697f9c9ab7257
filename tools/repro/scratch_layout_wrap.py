# qsdpa.scratch_layout accepts sizes whose products overflow 64 bits and returns wrapped numbers
# (total_bytes 0 for 2**63 threads) instead of raising; >= 2**64 gives pybind11's generic TypeError.
import qsdpa
for args in [(2**63, 1, 1, 1), (2**62, 2**20, 256, 1024), (2**64, 1, 1, 1)]:
    try:
        L = qsdpa.scratch_layout(*args)
        print(args, "-> slice_bytes", L["slice_bytes"], "total_bytes", L["total_bytes"])
    except Exception as e:
        print(args, "->", type(e).__name__, str(e)[:90].replace("\n", " "))
