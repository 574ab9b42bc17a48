"""Everything that talks to a node: the local runner, ssh/ (target, trust, pooled connection,
remote tails), the persistent node shell, file tails (inotify-woken), probes, listening-socket tables
and pre-flight checks."""
