"""A deployment's life: Run (run.py), its directory (rundir.py), events and state (events.py),
the diagnosis (diagnose.py), and the watchers that turn log lines and probes into events."""
