# scale given as a Python int beyond float range: OverflowError "int too large to convert to float",
# which is neither TypeError nor ValueError and does not name the argument.
import numpy as np, qsdpa
k8, ks, kz = qsdpa.quantize_per_token(np.ones((1, 4, 1, 8), np.float32))
q = np.ones((1, 1, 1, 8), np.float32)
try:
    qsdpa.quantized_sdpa(q, k8, k8, 0, scale=10**400, k_zero_points=kz, k_scales=ks, v_zero_points=kz, v_scales=ks)
except Exception as e:
    print(type(e).__name__, e)
