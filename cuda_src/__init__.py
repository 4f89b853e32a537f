"""The engine's CUDA C kernels, as source: shipped as package data, so an installed
roadgate (not only a checkout) can compile them; engine/ops/cuda_build.py does."""
