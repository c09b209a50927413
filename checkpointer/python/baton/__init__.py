"""baton: checkpoints that let a chain of wall-clock-limited jobs train like one uninterrupted run.

The native checkpointer (libbaton-ckpt) is exposed here; ``baton.torch`` adapts it to PyTorch.
"""

from ._native import (  # noqa: F401
    CheckpointStats,
    Checkpointer,
    ConfigError,
    Counters,
    Error,
    FormatError,
    Options,
    __version__,
    have_cuda,
    have_policy,
)

try:  # the policy and the sampler are part of the native module when it was built with them
    from ._native import Decision, Policy, PolicyOptions, ResumableSampler, permuted_index  # noqa: F401
except ImportError:
    pass
