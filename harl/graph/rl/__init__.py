"""Graph rewriting by reinforcement learning (X-RLflow on harl's rules): an environment over
rewrite graphs, a graph neural network policy, and PPO to train it."""
