"""Adapters to optional CUDA kernel libraries (``pip install 'zoo[kernels]'``), one file per
library: each maps zoo's tensors to the library's layout, calls it, and maps the result
back, so the mixers keep one maths (their PyTorch reference) and one dispatch line. Each
module's ``load`` imports its library once and says why where it cannot (the mixer then runs
the reference); tests substitute ``OPS`` with the libraries' own reference functions to check
the plumbing without a GPU."""
