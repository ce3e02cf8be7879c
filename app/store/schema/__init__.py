"""The tables, their column types, and how rows become the domain's values and back."""
