"""Kubernetes resource quantities (`500m`, `1.5Gi`, `1e3`) as exact decimals.

Exact because a Pod's requests are summed before rounding, as the kubelet does: rounding each
container first would make Slurm reserve more than Kubernetes accounts for.
"""

from __future__ import annotations

import decimal
import re
from decimal import Decimal

# Kubernetes' own bound (resource.Quantity): the API server never hands out anything larger.
MAX_MAGNITUDE = Decimal(2**63 - 1)

_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# The exponent is tried before the single-letter suffixes so that "1E3" is 1000 and "1E" is an exa.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))"
)

# Kubernetes reads the exponent as a 32-bit integer; anything wider is not a quantity.
_MAX_EXPONENT = 2**31 - 1

# Wide enough that multiplying by a binary suffix never rounds.
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def parse_quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity in base units (cores, bytes, items).

    Unlike Kubernetes, which silently caps values beyond 2^63-1, this rejects them: they can only
    come from hand-written input, never from the API server.
    """
    m = _QUANTITY.fullmatch(text)
    if m is None:
        raise ValueError(
            f"{text!r} is not a Kubernetes quantity (expected a number with an optional suffix"
            " such as 500m, 2, 1.5Gi, 10G or 1e3)"
        )
    number = Decimal(m["number"])
    if m["binary"] is not None:
        value = _EXACT.multiply(number, Decimal(2 ** _BINARY_SI[m["binary"]]))
    else:
        shift = int(m["exponent"]) if m["exponent"] is not None else _DECIMAL_SI[m["decimal"]]
        if abs(shift) > _MAX_EXPONENT:
            raise ValueError(f"{text!r} is out of range: its exponent is too large")
        sign, digits, exponent = number.as_tuple()
        assert isinstance(exponent, int)  # a parsed finite number, never NaN or infinity
        # Moving the decimal point by hand keeps it exact whatever the exponent.
        value = Decimal((sign, digits, exponent + shift))
    if value.copy_abs() > MAX_MAGNITUDE:
        raise ValueError(f"{text!r} is out of range: Kubernetes quantities stay within +/-(2^63-1)")
    return value
