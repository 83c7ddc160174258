"""Cluster operations: power, energy and cost; pooling and disaggregation."""
