"""One construct per concern; cdk/stack.py wires them together."""
