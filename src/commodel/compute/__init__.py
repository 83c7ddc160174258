"""Computation models: roofline per GPU and dtype, kernel FLOP and byte counts."""

from commodel.compute.kernels import Kernel, attention, elementwise, gemm
from commodel.compute.roofline import KernelTime, kernel_time

__all__ = ["Kernel", "KernelTime", "attention", "elementwise", "gemm", "kernel_time"]
