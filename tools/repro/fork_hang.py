# A process that has run a multi-threaded qsdpa call forks (os.fork, or multiprocessing's default
# "fork" start method on Linux/Python 3.11); the child's next qsdpa call never returns.
# Each child gets SIGALRM after 10 s: exit code -14 = hung.
import os, signal
import numpy as np, qsdpa
rng = np.random.default_rng(0)
k8, ks, kz = qsdpa.quantize_per_token(rng.standard_normal((1, 4096, 2, 64)).astype(np.float32))
q = rng.standard_normal((1, 1, 8, 64)).astype(np.float32)
kw = dict(k_zero_points=kz, k_scales=ks, v_zero_points=kz, v_scales=ks)
x = rng.standard_normal((4096, 128)).astype(np.float32)
qsdpa.set_num_threads(2)
qsdpa.quantized_sdpa(q, k8, k8, 4000, **kw)            # parent: a 2-thread call (OpenMP team created)
def child(label, fn):
    pid = os.fork()
    if pid == 0:
        signal.alarm(10)
        fn()
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    print(f"{qsdpa.get_isa():12s} child {label:45s} exit {os.waitstatus_to_exitcode(st)}", flush=True)
child("quantized_sdpa, 2 threads", lambda: qsdpa.quantized_sdpa(q, k8, k8, 4000, **kw))
child("quantized_sdpa, set_num_threads(1) first", lambda: (qsdpa.set_num_threads(1), qsdpa.quantized_sdpa(q, k8, k8, 4000, **kw)))
child("quantize_per_token (large), 2 threads", lambda: qsdpa.quantize_per_token(x))
