"""Design-space exploration: specs, samplers, vectorized evaluation, Pareto fronts, executors."""
