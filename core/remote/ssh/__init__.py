"""SSH to nodes and login hosts, the API in one place: targets and ~/.ssh/config (target.py),
host-key trust (trust.py), one pooled asyncssh connection per host (connection.py), the Runner over
it (runner.py) and log tails (tail.py). asyncssh itself is imported inside functions only."""

import warnings

from .connection import ConnState, SshConnection, close_all, pooled_connections
from .runner import SshRunner, ssh_runner_for_login, ssh_runner_for_node
from .target import (
    Backoff,
    HostKeyChanged,
    HostKeyUnknown,
    SshAuthFailed,
    SshConfigError,
    SshConnectionLost,
    SshError,
    SshTarget,
    SshUnreachable,
    remote_command,
)

# asyncssh 2.24 still names DSA keys at import, and cryptography (>= 40) warns about each use: three
# CryptographyDeprecationWarning lines on every verb that loads this layer. Silenced here, for asyncssh's
# modules and that message only, before asyncssh is imported: the modules above import it in functions only,
# and node_shell only after loading this package.
warnings.filterwarnings("ignore", message=r"DSA is deprecated", module=r"asyncssh(\.|$)")

__all__ = [
    "Backoff", "ConnState", "HostKeyChanged", "HostKeyUnknown", "SshAuthFailed", "SshConfigError", "SshConnection",
    "SshConnectionLost", "SshError", "SshRunner", "SshTarget", "SshUnreachable", "close_all", "pooled_connections",
    "remote_command", "ssh_runner_for_login", "ssh_runner_for_node",
]
