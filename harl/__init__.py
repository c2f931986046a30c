"""harl: a hierarchical reinforcement-learning auto-scheduler for deep-learning models on TVM."""

__version__ = "0.1.0"
