"""The cost profile (step_cost, step_costs, call_costs): minispec.methods.costs, by this name."""
from ..methods.costs import call_costs, step_cost, step_costs  # noqa: F401
