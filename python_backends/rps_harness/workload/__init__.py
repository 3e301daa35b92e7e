"""Workloads: request shapes, mixes and arrival processes."""
