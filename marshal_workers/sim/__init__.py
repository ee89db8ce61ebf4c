"""`marshal-sim`: a deterministic fleet simulator (real cores, virtual time, faults)."""
