"""baton: checkpoints that let a chain of wall-clock-limited jobs train like one uninterrupted run.

The native checkpointer (libbaton-ckpt) is exposed here; ``baton.torch`` adapts it to PyTorch.
"""

from ._native import (  # noqa: F401
    CallbackCoordinator,
    CheckpointReader,
    CheckpointStats,
    Checkpointer,
    ConfigError,
    Coordinator,
    Counters,
    Error,
    FileCoordinator,
    FormatError,
    Options,
    __version__,
    Decision,
    Policy,
    PolicyOptions,
    ResumableSampler,
    Session,
    SessionOptions,
    have_cuda,
    permuted_index,
)
