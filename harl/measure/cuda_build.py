"""CUDA candidates built here into libraries that a GPU server runs with the TVM runtime alone.

Without a CUDA runtime in the building process, TVM 0.27's codegen keeps the kernels as CUDA source
(a module of kind "cuda" whose format is "cuda") and leaves compiling to whoever loads the library:
the CUDA loader then calls the Python callback `tvm_callback_cuda_compile` (NVRTC by default), which
a server running the TVM runtime alone does not have. So here the source is compiled with nvcc to a
fatbin (SASS for the target's architecture plus its PTX, which newer GPUs JIT), and the library's
packed import blob is rewritten to carry the fatbin, format "fatbin": the server's loader only
calls cuModuleLoadData on it. The library is a .so, so the server needs no compiler either.

The blob layout (tvm-ffi's `PackImportsToBytes`; integers are little-endian u64, strings and byte
runs are length-prefixed): total size, import-tree row pointers, child indices, then per module its
kind and, unless it is the host library ("_lib"), its SaveToBytes payload. A CUDA module's
payload is [format][function map][code] (`CUDAModuleNode::SaveToBytes`, mirrored by the codegen's
fallback module).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from harl.tvm_adapter import imported_modules, pack_imports

HOST_KIND = "_lib"
FATBIN_MAGIC = 0xBA55ED50
LIBRARY_SYMBOL = "__tvm_ffi__library_bin"


@dataclass
class LibraryBlob:
    """A library's packed import tree: CSR import structure and (kind, payload) per module."""

    row_ptr: list[int]
    child_indices: list[int]
    modules: list[tuple[str, bytes | None]]


class _Reader:
    def __init__(self, data: bytes, offset: int = 0) -> None:
        self.data, self.offset = data, offset

    def u64(self) -> int:
        (value,) = struct.unpack_from("<Q", self.data, self.offset)
        self.offset += 8
        return value

    def u64s(self) -> list[int]:
        count = self.u64()
        values = list(struct.unpack_from(f"<{count}Q", self.data, self.offset))
        self.offset += 8 * count
        return values

    def chunk(self) -> bytes:
        size = self.u64()
        if self.offset + size > len(self.data):
            raise ValueError("truncated library blob")
        value = self.data[self.offset:self.offset + size]
        self.offset += size
        return value


def _chunk(value: bytes) -> bytes:
    return struct.pack("<Q", len(value)) + value


def _u64s(values: list[int]) -> bytes:
    return struct.pack(f"<Q{len(values)}Q", len(values), *values)


def parse_library_blob(blob: bytes) -> LibraryBlob:
    """Split a packed import blob (with its leading size) into its parts; strict about layout."""
    reader = _Reader(blob)
    if reader.u64() != len(blob) - 8:
        raise ValueError("library blob size does not match its header")
    row_ptr, child_indices = reader.u64s(), reader.u64s()
    modules: list[tuple[str, bytes | None]] = []
    while reader.offset < len(blob):
        kind = reader.chunk().decode()
        modules.append((kind, None if kind == HOST_KIND else reader.chunk()))
    if len(row_ptr) != len(modules) + 1:
        raise ValueError(f"import tree of {len(row_ptr) - 1} modules, blob holds {len(modules)}")
    return LibraryBlob(row_ptr, child_indices, modules)


def serialize_library_blob(library: LibraryBlob) -> bytes:
    body = _u64s(library.row_ptr) + _u64s(library.child_indices)
    for kind, payload in library.modules:
        body += _chunk(kind.encode()) + (b"" if payload is None else _chunk(payload))
    return struct.pack("<Q", len(body)) + body


def split_cuda_payload(payload: bytes, source: bytes) -> tuple[str, bytes]:
    """(format, function-map bytes) of a CUDA module payload whose code is `source`."""
    reader = _Reader(payload)
    fmt = reader.chunk().decode()
    tail = _chunk(source)
    if not payload.endswith(tail) or len(payload) - len(tail) < reader.offset:
        raise ValueError("CUDA module payload does not end with its source")
    return fmt, payload[reader.offset:len(payload) - len(tail)]


def compile_fatbin(source: str, target) -> bytes:
    """nvcc: SASS for the target's sm_XY and PTX for compute_XY (JIT-compiled on newer GPUs)."""
    from tvm.support import nvcc

    version = str(target.arch).removeprefix("sm_")
    arch = ["-gencode", f"arch=compute_{version},code=[sm_{version},compute_{version}]"]
    with target:  # nvcc.compile_cuda reads the current target's compute version
        return bytes(nvcc.compile_cuda(source, target_format="fatbin", arch=arch,
                                       compiler="nvcc"))


def _with_fatbins(host_module, target) -> bytes | None:
    """The host module's import blob with every CUDA-source module compiled to a fatbin.

    None when there is nothing to compile: where a CUDA runtime is loaded (a GPU machine), the
    codegen compiles the kernels itself and the modules hold a cubin (NVRTC) or a fatbin (nvcc).
    """
    blob = pack_imports(host_module)
    library = parse_library_blob(blob)
    sources = [m.inspect_source("cuda").encode()
               for m in imported_modules(host_module, "cuda")]
    changed = False
    for index, (kind, payload) in enumerate(library.modules):
        if kind != "cuda" or payload is None:
            continue
        if _Reader(payload).chunk() != b"cuda":
            continue  # a CUDA runtime was loaded here, so the codegen already compiled it
        for source in sources:
            try:
                _, function_map = split_cuda_payload(payload, source)
            except ValueError:
                continue
            fatbin = compile_fatbin(source.decode(), target)
            library.modules[index] = (kind, _chunk(b"fatbin") + function_map + _chunk(fatbin))
            changed = True
            break
        else:
            raise ValueError("a CUDA module of the build matches none of its sources")
    return serialize_library_blob(library) if changed else None


def _c_array(blob: bytes) -> str:
    """The blob as the C definition TVM's loader looks up in a library."""
    rows = ",\n".join(",".join(str(b) for b in blob[i:i + 32]) for i in range(0, len(blob), 32))
    return ('#ifdef __cplusplus\nextern "C" {\n#endif\n'
            f"extern const unsigned char {LIBRARY_SYMBOL}[];\n"
            f"const unsigned char {LIBRARY_SYMBOL}[{len(blob)}] = {{\n{rows}\n}};\n"
            "#ifdef __cplusplus\n}\n#endif\n")


def export_cuda_library(runtime_module, target, path: str) -> str:
    """Export a compiled CUDA candidate as a shared library carrying fatbin device code."""
    host = getattr(runtime_module, "mod", runtime_module)  # tvm.compile gives an Executable
    blob = _with_fatbins(host, target)
    if blob is None:
        host.export_library(path)
        return path

    def pack_imports(_module, is_system_lib: bool, prefix: str, workspace: str) -> str:
        if is_system_lib or prefix:
            raise ValueError("system-library CUDA candidates are not supported")
        source_path = os.path.join(workspace, "devc.c")
        with open(source_path, "w") as out:
            out.write(_c_array(blob))
        return source_path

    host.export_library(path, fpack_imports=pack_imports)
    return path
