"""Weight relay for decentralized prime-rl jobs (crf-prime's addition; not part of Cursor's recipe).

prime-rl's ``filesystem`` weight broadcast writes each policy step as HF safetensors under
``<output_dir>/broadcasts/step_<n>/`` and touches ``STABLE`` last (``src/prime_rl/transports/weights/filesystem.py``).
Inference nodes without that shared filesystem get the same directories from this relay:

- :mod:`crf_prime.relay.origin` watches the broadcast directory next to the trainer, packs each complete step into
  one archive and publishes it with shardcast (sharded, blake3 checksums, served over HTTP), then advertises it in an
  index file.
- :mod:`crf_prime.relay.node` runs on each remote inference node: it fetches the newest advertised step from one or
  more relay servers, verifies every shard and every file, and renames a finished ``step_<n>`` (``STABLE`` inside)
  into the local broadcast directory in one step, keeping only the last K.

The transport (sharding, checksums, HTTP serving and fetching) is shardcast 0.3.2; see ``docs/multinode.md`` for
the small gaps this package fills around it.
"""

from crf_prime.relay.layout import STABLE, local_stable_steps, step_dir
from crf_prime.relay.manifest import FileEntry, RelayIndex, ShardEntry, StepManifest

__all__ = ["STABLE", "FileEntry", "RelayIndex", "ShardEntry", "StepManifest", "local_stable_steps", "step_dir"]
