"""The per-ISA kernel tests, collected again with `kmod` = the SIMDe-emulated AVX-512 and NEON modules.

Every test function of the modules below that takes `kmod` (and not `isa_name`, which means
"a native, dispatchable variant") is re-exported here, so new kernel tests are picked up without
edits; in this module, `kmod` is the fixture of tests/emulated/conftest.py.
"""
import importlib
import inspect
import os
import sys

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _TESTS)

# Per-ISA kernel test modules in tests/ (the ones that exist are used).
KERNEL_TEST_MODULES = ("test_kernels", "test_attention", "test_properties", "test_quantize")

for _name in KERNEL_TEST_MODULES:
    if not os.path.exists(os.path.join(_TESTS, _name + ".py")):
        continue
    _mod = importlib.import_module(_name)
    for _test, _fn in vars(_mod).items():
        if _test.startswith("test_") and callable(_fn):
            _args = inspect.signature(_fn).parameters
            if "kmod" in _args and "isa_name" not in _args:
                globals()[_test] = _fn
