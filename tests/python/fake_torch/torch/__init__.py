"""A stand-in for PyTorch in tests (there is no PyTorch here): just what tessera.torch calls, with
PyTorch's behaviour, recording each call so that a test can check it."""
from torch import cuda  # noqa: F401
