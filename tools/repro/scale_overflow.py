# A scale that the API accepts (|scale| <= FLT_MAX) but that pushes float32 scores past FLT_MAX:
# the call succeeds with finite output that is far from attention on the same (dequantized) inputs,
# computed in float64. No error, no NaN: silent wrong answer.
import numpy as np, qsdpa
rng = np.random.default_rng(0)
B, S, H, D = 1, 16, 1, 8
k8, ks, kz = qsdpa.quantize_per_token(rng.standard_normal((B, S, H, D)).astype(np.float32))
v8, vs, vz = qsdpa.quantize_per_token(rng.standard_normal((B, S, H, D)).astype(np.float32))
q = rng.standard_normal((B, 1, H, D)).astype(np.float32)
kf = (k8.astype(np.float64) - kz) * ks
vf = (v8.astype(np.float64) - vz) * vs
for scale in (1e37, 1e38, 3e38):
    out = qsdpa.quantized_sdpa(q, k8, v8, S - 1, scale=scale, k_zero_points=kz, k_scales=ks, v_zero_points=vz, v_scales=vs)
    s = kf[0, :, 0] @ q[0, 0, 0].astype(np.float64) * scale
    w = np.exp(s - s.max()); w /= w.sum()
    ref = w @ vf[0, :, 0]
    print(f"scale={scale:g}: max|out - ref| = {np.abs(out[0, 0, 0] - ref).max():.3g}  (max|V| = {np.abs(vf).max():.3g})")
