# set_num_threads accepts n >= 2**31 silently; every later quantized_sdpa call then raises
# pybind11's RuntimeError "Unable to cast ... to C++ type '?'", and quantize_per_token a TypeError
# "quantize_rows(): incompatible function arguments" (neither names an argument the caller passed).
import numpy as np, qsdpa
x = np.random.default_rng(0).standard_normal((1, 8, 1, 16)).astype(np.float32)
k8, ks, kz = qsdpa.quantize_per_token(x)
q = x[:, :1].copy()
qsdpa.set_num_threads(2**31)                       # accepted: no error
print("get_num_threads() ->", qsdpa.get_num_threads())
out = np.full(q.shape, 12345.0, np.float32)
for label, fn in [("quantized_sdpa(out=)", lambda: qsdpa.quantized_sdpa(q, k8, k8, 0, k_zero_points=kz, k_scales=ks,
                                                                          v_zero_points=kz, v_scales=ks, out=out)),
                  ("quantize_per_token", lambda: qsdpa.quantize_per_token(x))]:
    try:
        fn(); print(label, "returned")
    except Exception as e:
        print(label, "->", type(e).__name__ + ":", str(e)[:140].replace("\n", " "))
print("out untouched:", bool((out == 12345.0).all()))
