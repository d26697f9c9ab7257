# QuantizedKVCache.update promises "on any error nothing is written". With k a view of the cache's
# own k_scales (head_dim = 1), the overlap is detected only in the k pass, after v has already been
# quantized into the cache: ValueError("scales must not overlap x"), yet the cache's V changed.
import numpy as np, qsdpa
rng = np.random.default_rng(0)
c = qsdpa.QuantizedKVCache(1, 8, 2, 1)
c.update(0, rng.standard_normal((1, 4, 2, 1)).astype(np.float32), rng.standard_normal((1, 4, 2, 1)).astype(np.float32))
before = [a.copy() for a in c.to_bshd()]
k = c.to_bshd().k_scales[:, :4]                      # float32 [1, 4, 2, 1]: a valid-looking k
try:
    c.update(0, k, np.full((1, 4, 2, 1), 7.0, np.float32))
    print("update accepted")
except Exception as e:
    print("update raised", type(e).__name__, e)
after = c.to_bshd()
for name, b, a in zip(after._fields, before, after):
    print(f"  {name:14s} changed: {not np.array_equal(b, a)}")
