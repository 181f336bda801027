"""The real safetensors loader for read-test --pid's tests.

    python safetensors_load.py make FILE MIB   writes FILE: MIB of random
                                               float32 tensors (32 MiB each)
                                               with safetensors' own writer
    python safetensors_load.py load FILE       loads every tensor of FILE
                                               with safe_open, pass after
                                               pass, the page cache of FILE
                                               dropped before each (cold)

`load` prints "ready" when it reads and stops when its stdin closes. It
uses safetensors' own API the way vLLM's default loader does
(`safe_open(..., framework=...)`, `get_tensor` per name): the file is
mapped by its Rust extension and copied tensor by tensor.
"""

import os
import sys
import threading

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

TENSOR_MIB = 32


def make(path, mib):
    rng = np.random.default_rng(7)
    n = TENSOR_MIB * (1 << 20) // 4
    tensors = {
        f"model.layers.{i}.weight": rng.standard_normal(n, dtype=np.float32)
        for i in range(mib // TENSOR_MIB)
    }
    save_file(tensors, path)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def load(path):
    stop = threading.Event()

    def wait_stdin():
        sys.stdin.buffer.read()
        stop.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    print("ready", flush=True)
    sink = 0.0
    while not stop.is_set():
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        with safe_open(path, framework="numpy") as f:
            for name in f.keys():
                if stop.is_set():
                    break
                sink += float(f.get_tensor(name)[0])
    print(f"done {sink:.1f}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]))
    else:
        load(sys.argv[2])
