"""Programmatic dependent launch between the engine's own kernels inside a CUDA graph.

Every kernel of cuda_src/ calls pdl_start() (common.cuh) before it reads what another
kernel writes: it waits until the kernel before it has finished and its writes are
visible, then lets the kernel after it launch. Where the graph's edge between two of
them is programmatic, the second kernel is launched as soon as every block of the first
is past that point: its blocks become resident and fetch their weights (before their own
pdl_start) while the first still runs, instead of after it. At batch 1 a layer is five
kernels of a few µs, each mostly the latency of its first loads; that latency is what
this hides. Plain edges and eager launches leave the two instructions no-ops.

PyCUDA launches without launch attributes, so the programmatic edges are made after
capture, in the captured graph (a torch.cuda.CUDAGraph kept with keep_graph=True, not
yet instantiated): every plain edge from one of our kernels to another is replaced by a
programmatic one, through the CUDA driver API (ctypes; CUDA 12.3 or later). An edge to
or from any other node (cuBLAS, torch's kernels, copies) stays as it was.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable

from engine.ops.driver import check, driver
from engine.ops.kernel_table import KERNELS

# Every kernel the table names calls pdl_start() first (tests/test_cuda_sources.py checks it).
OUR_KERNELS = frozenset(spec.name for spec in KERNELS)

_NODE_KERNEL = 0                 # CU_GRAPH_NODE_TYPE_KERNEL
_PORT_DEFAULT, _PORT_PROGRAMMATIC = 0, 1            # CU_GRAPH_KERNEL_NODE_PORT_*
_DEPENDENCY_DEFAULT, _DEPENDENCY_PROGRAMMATIC = 0, 1  # CU_GRAPH_DEPENDENCY_TYPE_*


class _EdgeData(ctypes.Structure):       # CUgraphEdgeData
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte), ("type", ctypes.c_ubyte),
                ("reserved", ctypes.c_ubyte * 5)]


class _KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_bytes", ctypes.c_uint), ("params", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


def edges_to_make_programmatic(edges: Iterable[tuple[int, int]],
                               kernel_name: Callable[[int], str | None]) -> list[tuple[int, int]]:
    """Of a graph's plain edges (from node, to node), those between two of our kernels.
    kernel_name(node): the node's kernel's name, None for a node that is not a kernel.
    (Edges from cuBLAS's kernels into ours, made programmatic too, slowed the decode step:
    B=256 ctx 1024 2.800 vs 2.745 ms, B=64 ctx 256 1.281 vs 1.225.)"""
    return [(a, b) for a, b in edges if kernel_name(a) in OUR_KERNELS and kernel_name(b) in OUR_KERNELS]


def make_programmatic(graph: int) -> int:
    """Make every plain edge between two of our kernels in `graph` (a cudaGraph_t handle,
    captured, not yet instantiated) programmatic; returns how many edges changed."""
    cuda = driver()
    handle = ctypes.c_void_p(graph)
    count = ctypes.c_size_t()
    check(cuda.cuGraphGetEdges_v2(handle, None, None, None, ctypes.byref(count)), "cuGraphGetEdges")
    n = count.value
    sources, targets, data = (ctypes.c_void_p * n)(), (ctypes.c_void_p * n)(), (_EdgeData * n)()
    check(cuda.cuGraphGetEdges_v2(handle, sources, targets, data, ctypes.byref(count)), "cuGraphGetEdges")
    plain = [(sources[i], targets[i]) for i in range(n)
             if data[i].type == _DEPENDENCY_DEFAULT and data[i].from_port == _PORT_DEFAULT]
    names: dict[int, str | None] = {}

    def kernel_name(node: int) -> str | None:
        if node not in names:
            names[node] = _kernel_name(cuda, node)
        return names[node]

    chosen = edges_to_make_programmatic(plain, kernel_name)
    programmatic = _EdgeData(from_port=_PORT_PROGRAMMATIC, type=_DEPENDENCY_PROGRAMMATIC)
    for a, b in chosen:
        src, dst = ctypes.c_void_p(a), ctypes.c_void_p(b)
        check(cuda.cuGraphRemoveDependencies_v2(handle, ctypes.byref(src), ctypes.byref(dst), None, 1),
              "cuGraphRemoveDependencies")
        check(cuda.cuGraphAddDependencies_v2(handle, ctypes.byref(src), ctypes.byref(dst),
                                             ctypes.byref(programmatic), 1), "cuGraphAddDependencies")
    return len(chosen)


def _kernel_name(cuda, node: int) -> str | None:
    kind = ctypes.c_int()
    check(cuda.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)), "cuGraphNodeGetType")
    if kind.value != _NODE_KERNEL:
        return None
    params = _KernelNodeParams()
    if cuda.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(node), ctypes.byref(params)) or not params.func:
        return None              # a kernel the driver cannot name by its function: not one of ours
    name = ctypes.c_char_p()
    if cuda.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(params.func)) or name.value is None:
        return None
    return name.value.decode()
