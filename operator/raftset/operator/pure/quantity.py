"""Kubernetes quantities ("5Gi", "500M", "1.5") as numbers, the way the apiserver reads them.

The same rules as kubernetes.utils.quantity.parse_quantity, here so that the pure modules need
no API client library.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

_EXPONENTS = {"n": -3, "u": -2, "m": -1, "K": 1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def parse_quantity(quantity: str | int | float | Decimal) -> Decimal:
    """`quantity` as a number of units; ValueError for a malformed one or an unknown suffix."""
    if isinstance(quantity, (int, float, Decimal)):
        return Decimal(quantity)
    text = str(quantity)
    number, suffix = text, ""
    if len(text) >= 2 and text[-1] == "i":
        if text[-2] in _EXPONENTS:
            number, suffix = text[:-2], text[-2:]
    elif text and text[-1] in _EXPONENTS:
        number, suffix = text[:-1], text[-1:]
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"Invalid number format: {number}") from None
    if not suffix:
        return value
    if suffix == "ki":  # the SI prefix is k, the binary one Ki
        raise ValueError(f"{text} has unknown suffix")
    base = 1024 if suffix.endswith("i") else 1000
    return value * (base ** Decimal(_EXPONENTS[suffix[0]]))
