"""Kernel names ring_flash_attn imports; each raises: there is no flash attention without a GPU."""


def _unavailable(*_args, **_kwargs):
    raise RuntimeError("flash_attn is a CUDA kernel; the CPU rehearsal only imports it (stand-in)")


_flash_attn_forward = _flash_attn_backward = _unavailable
_flash_attn_varlen_forward = _flash_attn_varlen_backward = _unavailable
flash_attn_func = flash_attn_varlen_func = _unavailable
