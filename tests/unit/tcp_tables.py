"""/proc/net/tcp{,6} as a sandbox host's kernel prints its sshd's connection to the controller, for the tests of
controller_link and of the guard's renewals (issue #36 item 11)."""
from __future__ import annotations

from pathlib import Path

# sshd on a sandbox host (10.213.0.11:22) and the controller (10.213.0.1:40000), as SSH_CONNECTION names them.
SSH_CONNECTION = "10.213.0.1 40000 10.213.0.11 22"
SANDBOX = ("10.213.0.11", 22), ("10.213.0.1", 40000)

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
LISTENER = ("   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41213 1 0 100 "
            "0 0 10 0\n")
# The session's connection with everything acknowledged (sshd's keepalive timer pending)...
ACKNOWLEDGED = ("   1: 0B00D50A:0016 0100D50A:9C40 01 00000000:00000000 02:000A8C1B 00000000     0        0 52117 4 0 "
                "20 4 30 10 -1\n")
# ... and 7 s into a silent partition: 3 bytes of heartbeats unacknowledged, the retransmission timer pending, 3
# timeouts fired.
PARTITIONED = ("   1: 0B00D50A:0016 0100D50A:9C40 01 00000003:00000000 01:0000001C 00000003     0        0 52117 4 0 "
               "1600 4 30 10 -1\n")
# The same connection through an sshd listening on :: (/proc/net/tcp6, IPv4-mapped addresses).
MAPPED = ("   1: 0000000000000000FFFF00000B00D50A:0016 0000000000000000FFFF00000100D50A:9C40 01 00000001:00000000 "
          "01:00000030 00000002     0        0 52117 1 0 400 4 30 10 -1\n")


def write_table(path: Path, *rows: str) -> str:
    """A table with ``rows``, replaced whole (a reader never sees half of it); its path."""
    staged = path.with_name(path.name + ".new")
    staged.write_text(HEADER + "".join(rows), encoding="ascii")
    staged.replace(path)
    return str(path)
