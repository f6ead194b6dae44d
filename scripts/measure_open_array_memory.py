"""Memory a message can take before the RPC object limit sees it: short strings in arrays still open.

The limit (daemon/protocol/rpc.py MAX_MESSAGE_OBJECTS) counts a container's items when it completes; this
feeds the daemon's FrameReader three nested arrays of 2^20 items, each 2^20-1 two-character
strings and then the next array, all but its last bytes (every array still open), and prints the
growth of the process's peak RSS.

    .venv/bin/python scripts/measure_open_array_memory.py
"""

from __future__ import annotations

import resource

import msgpack


from ngramd.daemon.protocol.rpc import FrameReader


def main() -> int:
    n = (1 << 20) - 1
    parts = [b"\xdd" + (n + 1).to_bytes(4, "big") + msgpack.packb("ab") * n for _ in range(3)]
    data = (b"".join(parts) + msgpack.packb("ab"))[:-3]  # the last string unsent
    reader = FrameReader()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for i in range(0, len(data), 1 << 16):
        reader.feed(data[i:i + (1 << 16)])
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(f"{len(data) / 1e6:.1f} MB on the wire, every array still open: peak RSS grew {grew:.0f} MB"
          f" ({grew * 1024 * 1024 / len(data):.0f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
