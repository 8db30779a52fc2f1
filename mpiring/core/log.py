"""Library logging: quiet by default, detailed with ``MPIRING_DEBUG=1``."""

from __future__ import annotations

import logging

from . import settings


def configure_logging() -> None:
    """Attach a stderr handler at DEBUG level when MPIRING_DEBUG is set; otherwise stay silent."""
    logger = logging.getLogger("mpiring")
    if settings.flag("MPIRING_DEBUG"):
        if not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("mpiring %(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    else:
        logger.addHandler(logging.NullHandler())
