"""The operator's shells: one module per component (its renderer beside its sync), the registry that orders
them, and the shells of the reconcile's reads (diagnosis) and tellings (narration)."""
