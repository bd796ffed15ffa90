"""crf-prime: Cursor's Composer 2.5 post-training recipe for the PRIME stack (prime-rl + verifiers).

Channels 1 (RLVR) and 2 (hint self-distillation) replicate Cursor's published recipe; channel 3 (trace replay with
frozen teachers) is crf-prime's own research addition.
"""

__version__ = "0.1.0"
