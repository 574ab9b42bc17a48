"""Everything that talks to a node: the local runner, ssh/ (target, trust, pooled connection,
remote tails), the persistent node shell, file tails, probes and pre-flight checks."""
