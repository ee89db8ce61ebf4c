"""`marshal-admin`: the operator's commands."""
