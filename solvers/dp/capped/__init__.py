"""The capped DP: Pareto fronts of (cost, memory) with Lagrangian bounds."""
