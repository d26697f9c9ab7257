# Accepted finite inputs whose (query scale x softmax scale) product overflows float32: the output is
# finite but wrong (all zeros = "fully masked" on scalar, a plain average of some V rows on the SIMD
# variants: the variants also disagree with each other). float64 attention on the same dequantized
# inputs gives rows 8, 9, 10, ...  No exception.
import numpy as np, qsdpa
B, S, H, D = 1, 4, 1, 8
k8 = np.zeros((B, S, H, D), np.int8); k8[0, 1] = 3; k8[0, 2] = -2        # keys 0 and 3: dot product 0
kz = np.zeros((B, S, H, 1), np.int8); ks = np.ones((B, S, H, 1), np.float32)
v8 = np.arange(S * D, dtype=np.int8).reshape(B, S, H, D); vz = kz.copy(); vs = ks.copy()
q8 = np.ones((B, 1, H, D), np.int8); qz = np.zeros((B, 1, H, 1), np.int8)
qs = np.full((B, 1, H, 1), 1e30, np.float32)                                # finite, > 0: accepted
out = qsdpa.quantized_sdpa(q8, k8, v8, S - 1, scale=1e10, q_zero_points=qz, q_scales=qs,
                           k_zero_points=kz, k_scales=ks, v_zero_points=vz, v_scales=vs)
print(qsdpa.get_isa(), "int8 query :", out.ravel()[:4])
qf = np.full((B, 1, H, D), 3e38, np.float32)                                # float32 query, finite
out = qsdpa.quantized_sdpa(qf, k8, v8, S - 1, scale=2.0, k_zero_points=kz, k_scales=ks, v_zero_points=vz, v_scales=vs)
print(qsdpa.get_isa(), "float query:", out.ravel()[:4])
print("float64 reference (key 1 wins):", v8[0, 1, 0, :4].astype(float))
