"""The path reprs show for what ``domain`` exports: ``domain.ShortLinks``, not
``domain.shortlinks.ShortLinks``.

Each defining module calls :func:`shown_as_domain` on its exports when it is imported, so that
the name is the same whichever path imported it first (``domain/__init__.py`` imports lazily):
a failure record's ``error_type`` reads ``domain.MailDeliveryError`` in every process. Events
keep their module: their string annotations are resolved in its namespace.
"""

from __future__ import annotations

from eventbus.lazy import show_as_module

__all__ = ["shown_as_domain"]


def shown_as_domain(*exported: object) -> None:
    """Set the ``__module__`` of each class or function in *exported* to ``"domain"``."""
    show_as_module("domain", *exported, public_too=True)
