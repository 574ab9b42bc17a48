"""atomdeck simulator shim standing in for ATOM (see atomdeck.sim)."""
