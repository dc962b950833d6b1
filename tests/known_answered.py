"""A stand-in for a model that answers known contacts, for the tests whose subject is
what becomes of such an answer (its thread, its outbox row, a restart that finds it owed,
a loop it must not start), not the model.

They used the offline brain's answer to a known contact, its restricted notice: since
session 41 the offline brain answers none (their message goes to the owner, see
:mod:`bot.known_answers`). :class:`KnownAnswered` is the offline brain under another
name, so that the router asks it as it asks a model, and it answers with that same
notice (the owner keeps the offline readouts). No config reaches it: a test builds it,
hands it to :func:`bot.services.open_services` (:func:`answering_brain` with the
services' search, :func:`known_contacts_answered` around an ``open_services`` call), or
starts the daemon through :mod:`tests.ops.answering_daemon`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from unittest import mock

from bot import services as services_module
from bot.brain.offline import OfflineBrain

if TYPE_CHECKING:
    from bot.brain.base import Brain
    from bot.config.model import AppConfig
    from bot.services import Services

_build_brain = services_module.build_brain


class KnownAnswered(OfflineBrain):
    """The offline brain under another name: a known contact's message is answered with
    its restricted notice, a durable answer and an outbox row as a model's would be."""

    name = "known-answered"


def answering_brain(config: AppConfig, services: Services) -> Brain:
    """What :func:`bot.services.build_brain` builds, with :class:`KnownAnswered` in
    place of the offline brain (a configured model is kept)."""
    brain = _build_brain(config, services)
    if isinstance(brain, OfflineBrain):
        return KnownAnswered(services.search)
    return brain


@contextmanager
def known_contacts_answered() -> Iterator[None]:
    """Within it, :func:`bot.services.open_services` builds :func:`answering_brain`."""
    with mock.patch.object(services_module, "build_brain", answering_brain):
        yield
