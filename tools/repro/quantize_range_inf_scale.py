# A finite row whose range exceeds float32: quantize_per_token / QuantizedKVCache.update used to
# return / store an infinite scale (q8 that dequantize to NaN) with no error, as PyTorch's
# choose_qparams_per_token_asymmetric does; both now raise ValueError naming x / k, nothing written.
import numpy as np, qsdpa
x = np.array([[3e38, -3e38, 1.0, 0.0]], np.float32)       # every value finite
try:
    q8, s, z = qsdpa.quantize_per_token(x)
    print("quantize_per_token:", q8.tolist(), s.tolist(), z.tolist())
    print("dequantize_per_token:", qsdpa.dequantize_per_token(q8, s, z).tolist())
except ValueError as e:
    print("quantize_per_token raised ValueError:", e)
try:
    import torch
    from torch.ao.quantization.fx._decomposed import quantized_decomposed_lib  # noqa registers ops
    t = torch.from_numpy(x)
    ts, tz = torch.ops.quantized_decomposed.choose_qparams_per_token_asymmetric(t, torch.int8)
    print("torch choose_qparams_per_token_asymmetric scale:", ts.tolist(), "zp:", tz.tolist())
except Exception as e:
    print("torch comparison unavailable:", type(e).__name__, e)
cache = qsdpa.QuantizedKVCache(1, 4, 1, 4)
k = x.reshape(1, 1, 1, 4); v = np.ones((1, 1, 1, 4), np.float32)
try:
    cache.update(0, k, v)
    print("update accepted; cache length", cache.length, "k_scales[0]", cache.to_bshd().k_scales[0, 0, 0, 0])
except Exception as e:
    print("update raised", type(e).__name__, e)
try:
    print(cache.attend(np.ones((1, 1, 1, 4), np.float32), 0))
except Exception as e:
    print("attend raised", type(e).__name__, e)
