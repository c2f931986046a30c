"""A loopback TVM RPC device farm: `python -m harl.farm up|status|down`."""
