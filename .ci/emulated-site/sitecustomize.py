"""CI only: on PYTHONPATH for .ci/run's qemu-user test runs.

qemu-user emulates one process and does not follow exec: a test that re-runs ``sys.executable``
(dispatch tests in a fresh interpreter, py-cpuinfo's helper, multiprocessing spawn) would get the
host CPU under qemu-x86_64, and ENOEXEC under qemu-aarch64. .ci/run points QSDPA_CI_PYTHON_WRAPPER at
a script that starts the child under the same emulator and CPU model (QEMU_CPU is inherited), so
children see the emulated CPU too, with no system-wide binfmt_misc registration.
"""
import os
import sys

_wrapper = os.environ.get("QSDPA_CI_PYTHON_WRAPPER")
if _wrapper:
    sys.executable = _wrapper
