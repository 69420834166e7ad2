"""edge-export: pinned checkpoints to verified, signed edge artifacts.

Heavy modules (torch, onnxruntime, transformers) are imported inside the
functions that need them, so that ``edge-export --help``, the manifest tools
and the load gate start without them.
"""

__version__ = "0.1.0"
