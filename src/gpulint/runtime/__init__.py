"""gpulint's runtime half: probe the machine, run the evidence benches, hold the roofline.

Nothing in this package imports torch at import time. torch (and nvidia-ml-py for the shared-GPU
guard) are the optional ``gpulint[bench]`` extra; the benches import them inside the functions
that need them, so the linter, ``gpulint probe`` and ``gpulint roofline`` work without either.

Modules, in the order a reader meets them:

- ``stats``: the figures a claim may quote (median, min, max over at least three runs).
- ``evidence``: the versioned record each bench run writes, its validation, loading, and the
  one-sentence note a lint message quotes (``evidence_note``).
- ``roofline``: dense peaks and memory bandwidth from the hardware table; refuses the unknown.
- ``guard``: the shared-GPU guard (NVML): no load starts on a GPU that someone else is using.
- ``probe``: versions, devices, flash-attention implementations, the environment that matters.
- ``harness`` and ``benches``: timing with CUDA events, one module per bench.
- ``cli``: ``register(subparsers)`` adds ``probe``, ``bench`` and ``roofline`` to the CLI.
"""
