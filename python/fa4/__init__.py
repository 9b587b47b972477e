"""fa4: exact attention (FlashAttention-4 design) for NumPy, PyTorch and any DLPack tensor.

    import fa4
    out = fa4.attention(q, k, v, causal=True)          # q/k/v [B, S, H, D]; numpy, torch, ...
    out, lse = fa4.attention(q, k, v, return_lse=True)
    out = fa4.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    out = fa4.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, page_table=pt)
    out = fa4.combine(out_partials, lse_partials)

    from fa4.flash_attn_compat import flash_attn_func      # flash-attn 2's names and argument order
    from fa4.flash_attn_interface import flash_attn_func   # flash-attn 3's
    import fa4.distributed                                 # ring attention on torch.distributed (lazy)
    import fa4.jax                                         # jax arrays, under jax.jit: XLA FFI (lazy)

Outputs are allocated in the caller's framework. With torch, the ops are also registered as
torch.library custom ops (torch.ops.fa4.*) so torch.compile(fullgraph=True) traces them.
Errors are fa4.Fa4Error subclasses of ValueError / TypeError / RuntimeError whose .argument
names the offending argument.
"""

import os as _os
import sys as _sys

from . import _fa4
from ._api import (
    attention,
    attention_varlen,
    attention_with_kvcache,
    backend_available,
    backend_info,
    combine,
)
from ._errors import (
    BackendUnavailableError,
    DeviceError,
    DTypeError,
    Fa4Error,
    InternalError,
    InvalidArgumentError,
    OutOfMemoryError,
    UnsupportedError,
)
from .flash_attn_compat import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)
from . import flash_attn_compat, flash_attn_interface

__version__ = _fa4.version()
built_with_cuda = bool(_fa4.built_with_cuda)


def register_torch_ops():
    """Registers fa4's torch.library ops (torch.ops.fa4.fwd, fwd_append, combine) and routes
    torch tensors through them (idempotent). ``import fa4`` never imports torch itself: when torch
    is already imported this runs then; otherwise on the first torch tensor fa4 sees (or set
    FA4_IMPORT_TORCH=1 to import torch at ``import fa4``). Call it yourself before
    torch.compile-ing code that calls fa4 if torch was imported after fa4 and no torch tensor
    has been through fa4 yet."""
    from . import _torch

    _torch.register()


def _maybe_torch():
    if "torch" not in _sys.modules and _os.environ.get("FA4_IMPORT_TORCH", "0") != "1":
        return  # lazily, on the first torch tensor (fa4._api._is_torch)
    try:
        register_torch_ops()
    except Exception as e:  # a broken torch install must not break `import fa4`
        import warnings

        warnings.warn(f"fa4: torch could not be set up ({type(e).__name__}: {e}); torch support is off",
                      RuntimeWarning, stacklevel=2)


_maybe_torch()


def __getattr__(name):
    # fa4.distributed (torch only) and fa4.jax (jax only) are imported on first use, not by
    # `import fa4`.
    if name in ("distributed", "jax"):
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'fa4' has no attribute {name!r}")


__all__ = [
    "attention", "attention_varlen", "attention_with_kvcache", "combine", "backend_info",
    "backend_available", "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
    "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_compat", "flash_attn_interface",
    "register_torch_ops", "Fa4Error", "InvalidArgumentError", "DTypeError", "UnsupportedError",
    "BackendUnavailableError", "DeviceError", "OutOfMemoryError", "InternalError", "built_with_cuda",
]
