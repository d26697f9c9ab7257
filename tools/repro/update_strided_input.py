# QuantizedKVCache.update rejects ordinary strided float32 views of k/v (reversed last axis,
# broadcast, reversed positions in a "bhsd" cache) with a ValueError naming the kernel's internal
# parameter "x" instead of k or v (quantized_sdpa and quantize_per_token copy such views instead).
import numpy as np, qsdpa
rng = np.random.default_rng(0)
def run(label, layout, k, v):
    c = qsdpa.QuantizedKVCache(1, 8, 2, 4, layout=layout)
    try:
        c.update(0, k, v); print(f"{label}: accepted")
    except Exception as e:
        print(f"{label}: {type(e).__name__}: {e}")
x = rng.standard_normal((1, 3, 2, 4)).astype(np.float32)
run("bshd, v = x[..., ::-1]", "bshd", x, x[..., ::-1])
run("bshd, k = x[..., ::-1]", "bshd", x[..., ::-1], x)
run("bshd, k = np.broadcast_to(...)", "bshd", np.broadcast_to(np.float32(1), x.shape), x)
run("bhsd, k = x[:, :, ::-1]  (positions reversed)", "bhsd", x.transpose(0, 2, 1, 3)[:, :, ::-1], x.transpose(0, 2, 1, 3))
print("quantize_per_token(x[..., ::-1]) for comparison:", qsdpa.quantize_per_token(x[..., ::-1])[1].ravel()[:2])
