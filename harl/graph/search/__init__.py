"""Searches over the graph rules: TASO-style greedy, and equality saturation guided by MCTS."""
