"""The graph level: rewrites of a Relax dataflow graph, their costs and the searches over them."""
