"""Library logging: quiet by default, detailed with ``MPIRING_DEBUG=1``."""

from __future__ import annotations

import logging
import os


def configure_logging() -> None:
    """Attach a stderr handler at DEBUG level when MPIRING_DEBUG is set; otherwise stay silent."""
    logger = logging.getLogger("mpiring")
    if os.environ.get("MPIRING_DEBUG", "") not in ("", "0"):
        if not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("mpiring %(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    else:
        logger.addHandler(logging.NullHandler())
