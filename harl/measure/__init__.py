"""Building and timing candidates: local processes here, TVM RPC for device farms."""
