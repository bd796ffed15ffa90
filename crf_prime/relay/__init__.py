"""Weight relay for decentralized prime-rl jobs (crf-prime's addition; not part of Cursor's recipe).

prime-rl's ``filesystem`` weight broadcast writes each policy step as HF safetensors under
``<output_dir>/broadcasts/step_<n>/`` and touches ``STABLE`` last (``src/prime_rl/transports/weights/filesystem.py``).
Inference nodes without that shared filesystem get the same directories from this relay:

- :mod:`crf_prime.relay.origin` watches the broadcast directory next to the trainer, hard-links each complete step
  into its data directory, hashes it shard by shard (blake3) and advertises it in an index file;
- :mod:`crf_prime.relay.transport` serves that over HTTP (ranged ``sendfile`` GETs, a long-polled index) and fetches
  byte ranges straight into files (``splice``);
- :mod:`crf_prime.relay.node` runs on each remote inference node: it pulls each step as soon as a server advertises
  it, verifies every shard, and renames a finished ``step_<n>`` (``STABLE`` inside) into the local broadcast
  directory in one step, keeping only the last K;
- :mod:`crf_prime.relay.gate` sits in front of the node's engine admin routes and holds a weight update until its
  step is in place.

See ``docs/multinode.md`` for why the transport is the standard library rather than shardcast.
"""

from crf_prime.relay.layout import STABLE, local_stable_steps, step_dir
from crf_prime.relay.manifest import FileEntry, RelayIndex, ShardEntry, StepManifest

__all__ = ["STABLE", "FileEntry", "RelayIndex", "ShardEntry", "StepManifest", "local_stable_steps", "step_dir"]
