# QuantizedKVCache.update with k a view of the cache's own v_scales (head_dim = 1): accepted, but the
# v pass overwrites v_scales before k is read, so the cache stores the quantization of v's new
# scales, not of the k that was passed. No error.
import numpy as np, qsdpa
rng = np.random.default_rng(0)
c = qsdpa.QuantizedKVCache(1, 8, 2, 1)
c.update(0, rng.standard_normal((1, 4, 2, 1)).astype(np.float32), rng.standard_normal((1, 4, 2, 1)).astype(np.float32))
k = c.to_bshd().v_scales[:, :4]
k_as_passed = k.copy()
c.update(0, k, np.full((1, 4, 2, 1), 5.0, np.float32))
t = c.to_bshd()
stored = qsdpa.dequantize_per_token(t.key[:, :4], t.k_scales[:, :4], t.k_zero_points[:, :4])
print("k as passed      :", np.round(k_as_passed.ravel(), 5))
print("k stored (dequant):", np.round(stored.ravel(), 5))
print("max abs error:", float(np.abs(stored - k_as_passed).max()), " (quantization step ~", float(k_as_passed.max()) / 255, ")")
