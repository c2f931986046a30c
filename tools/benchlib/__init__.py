"""Parts of `python tools/bench.py`: runs, curves, interleaved timing, reports, plots, roofline."""
