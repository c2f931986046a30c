"""The CPU's fp32 FMA peak, measured by a small C kernel, and numpy's BLAS as a practical ceiling.

The kernel runs independent chains of vector FMAs (acc = acc * m + c) with no memory traffic; GCC's
vector extensions let `-march=native` pick the widest registers (zmm with AVX-512, ymm with AVX2).
One thread per core calls it through ctypes, which releases the GIL during the call.
"""

from __future__ import annotations

import ctypes
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harl.errors import HarlError
from harl.evaluate import median_wall_ms

CHAINS = 12  # > FMA latency (4) x FMA ports (2): enough independent work to fill both units
FMA_SOURCE = r"""
#ifdef __AVX512F__
#define LANES 16
#else
#define LANES 8
#endif
typedef float vec __attribute__((vector_size(LANES * 4)));

int fma_lanes(void) { return LANES; }

float fma_chains(long iterations) {
    vec acc[CHAINS];
    const vec m = (vec){} + 0.9999999f, c = (vec){} + 1e-7f;
    for (int j = 0; j < CHAINS; ++j) acc[j] = (vec){} + (float)j;
    for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
        for (int j = 0; j < CHAINS; ++j) acc[j] = acc[j] * m + c;
    }
    float sum = 0.0f;  /* returned, so that the loop cannot be dropped */
    for (int j = 0; j < CHAINS; ++j)
        for (int k = 0; k < LANES; ++k) sum += acc[j][k];
    return sum;
}
"""


@dataclass(frozen=True)
class PeakResult:
    gflops_all_cores: float
    gflops_one_core: float
    lanes: int
    threads: int
    compiler: str


def build_fma_kernel(folder: Path) -> tuple[ctypes.CDLL, str]:
    """Compile the FMA kernel with the system C compiler; return it and the compiler's name."""
    folder.mkdir(parents=True, exist_ok=True)
    source, library = folder / "fma_peak.c", folder / "fma_peak.so"
    source.write_text(f"#define CHAINS {CHAINS}\n{FMA_SOURCE}")
    command = ["cc", "-O2", "-march=native", "-ffp-contract=fast", "-shared", "-fPIC",
               "-o", str(library), str(source)]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
        version = subprocess.run(["cc", "--version"], capture_output=True,
                                 text=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError) as err:
        raise HarlError(f"cannot compile the FMA microbenchmark with cc: {err}") from None
    kernel = ctypes.CDLL(str(library))
    kernel.fma_chains.argtypes, kernel.fma_chains.restype = [ctypes.c_long], ctypes.c_float
    kernel.fma_lanes.restype = ctypes.c_int
    return kernel, f"{version}, {' '.join(command[1:4])}"


def _gflops(kernel, threads: int, iterations: int) -> float:
    workers = [threading.Thread(target=kernel.fma_chains, args=(iterations,))
               for _ in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    return threads * iterations * CHAINS * kernel.fma_lanes() * 2 / elapsed / 1e9


def measure_peak(folder: Path, threads: int, seconds: float = 0.5, repeats: int = 5) -> PeakResult:
    """Best of `repeats` runs of about `seconds` each, on one core and on `threads` cores."""
    kernel, compiler = build_fma_kernel(folder)
    probe = 1_000_000
    start = time.perf_counter()
    kernel.fma_chains(probe)
    iterations = max(probe, int(probe * seconds / (time.perf_counter() - start)))
    one = max(_gflops(kernel, 1, iterations) for _ in range(repeats))
    every = max(_gflops(kernel, threads, iterations) for _ in range(repeats))
    return PeakResult(every, one, kernel.fma_lanes(), threads, compiler)


def theoretical_peak_gflops(cores: int, mhz: float | None, lanes: int = 8) -> float | None:
    """cores x clock x 2 FMA units x `lanes` fp32 lanes (8: 256 bit; the widest FMA the peak
    kernel was built for) x 2 FLOP per FMA. Under a hypervisor the clock is often the nominal
    one, below the boost the cores run at: the measured peak can exceed this."""
    return None if mhz is None else cores * mhz / 1e3 * 2 * lanes * 2


class NumpyMatmul:
    """numpy's BLAS fp32 matmul, shaped like the interleaved timing's runners."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.a = rng.standard_normal((n, n), dtype=np.float32)
        self.b = rng.standard_normal((n, n), dtype=np.float32)

    def run(self, _inputs=None) -> list[np.ndarray]:
        return [self.a @ self.b]

    def median_latency_ms(self, _inputs, repeats: int) -> float:
        return median_wall_ms(self.run, repeats)
