# set_num_threads(1000) is accepted; when the OS cannot create that many threads (here an
# address-space limit of 3 GiB stands in for a small container), libgomp prints
# "Thread creation failed" and exits the process with status 1: no Python exception.
import resource
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
import numpy as np, qsdpa
x = np.random.default_rng(0).standard_normal((1, 4096, 1, 64)).astype(np.float32)
k8, ks, kz = qsdpa.quantize_per_token(x)
q = x[:, :1].copy()
qsdpa.set_num_threads(1000)
try:
    qsdpa.quantized_sdpa(q, k8, k8, 4000, k_zero_points=kz, k_scales=ks, v_zero_points=kz, v_scales=ks)
    print("returned")
except BaseException as e:
    print("raised", type(e).__name__, e)
print("still alive")
