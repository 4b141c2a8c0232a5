"""tessera's optional sitecustomize: not active unless its directory is put on PYTHONPATH
(`python -m tessera.torch --sitecustomize-dir` prints it). Then, with TESSERA_TORCH=1 in the
environment, every Python process imports torch and calls tessera.torch.enable() before its
program runs, so PyTorch allocates through tessera with no change to the program. A
sitecustomize further on the path (a distribution's) still runs, after this one.
"""
import importlib.machinery
import importlib.util
import os
import sys


def _enable():
    if os.environ.get("TESSERA_TORCH", "") in ("", "0"):
        return
    try:
        import tessera.torch

        tessera.torch.enable()
    except Exception as e:  # the program still runs, without tessera: say so, once
        print(f"tessera: TESSERA_TORCH={os.environ['TESSERA_TORCH']}: PyTorch is not allocating "
              f"through tessera: {e}", file=sys.stderr)


def _chain():
    """Run the sitecustomize this one hides, if there is one further on the path."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec and spec.loader and spec.origin and os.path.dirname(os.path.abspath(spec.origin)) != here:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_enable()
_chain()
