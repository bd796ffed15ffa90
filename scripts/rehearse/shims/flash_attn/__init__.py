"""Import stand-in for flash-attn (a CUDA kernel wheel prime-rl installs from a GitHub release URL).

prime-rl's orchestrator imports it transitively (orchestrator/watcher.py -> transports/weights/filesystem.py ->
trainer/lora.py -> trainer/models -> utils/cp.py -> ring_flash_attn -> flash_attn.flash_attn_interface); nothing on
the rehearsal's path calls it. Used only when the real wheel cannot be installed; every kernel raises if called.
"""

__version__ = "2.8.3"
