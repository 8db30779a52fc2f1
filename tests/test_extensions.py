"""``mpiring.core.extensions``: one rule for the optional C extensions."""

from __future__ import annotations

import json

from mpiring.core import extensions


def test_an_extension_is_its_module_unless_turned_off_or_not_built() -> None:
    assert extensions.optional("json", {}) is json  # any importable module stands for a built one
    assert extensions.optional("json", {"MPIRING_HOTPATH": "1"}) is json
    assert extensions.optional("json", {"MPIRING_HOTPATH": "0"}) is None
    assert extensions.optional("mpiring.call._not_built", {}) is None
