"""Who an inbound mail says it is from, against spoofing: the owner's address is the
owner only when the receiving server's Authentication-Results vouch for that one From
address (SPEC.md "Routing and trust"); look-alikes never match the owner at all."""

from __future__ import annotations

import pytest

from bot.config.channels import EmailChannelConfig
from bot.identity import OwnerIdentities
from channels.email.inbound import to_inbound
from channels.email.parsing import parse_message
from tests.conftest import OWNER_EMAIL, make_config, owner_identities

OWNER = "robin.owner@example.org"


def _raw(from_lines: list[str], auth: str) -> bytes:
    head = "".join(f"From: {f}\r\n" for f in from_lines)
    return (
        f"Authentication-Results: {auth}\r\n{head}To: bot@example.com\r\n"
        "Subject: hi\r\nMessage-ID: <x1@example.org>\r\n"
        "Date: Tue, 14 Jan 2025 09:12:00 +0100\r\n\r\nwhat did we say about my salary?\r\n"
    ).encode()


def _verified(raw: bytes, **cfg: object) -> bool | None:
    config = EmailChannelConfig(**cfg)  # type: ignore[arg-type]
    return to_inbound(parse_message(raw), raw, 1, "1", config).identity_verified


@pytest.mark.parametrize(
    "from_lines",
    [
        # two From headers: the server's DMARC may have judged the other one
        [f"Robin <{OWNER}>", "Eve <eve@evil.example>"],
        ["Eve <eve@evil.example>", f"Robin <{OWNER}>"],
        # two mailboxes in one From header
        [f"{OWNER}, eve@evil.example"],
    ],
)
def test_a_mail_with_more_than_one_from_address_is_never_verified(
    from_lines: list[str],
) -> None:
    # Regression: the first From address was checked against a "dmarc=pass" that may
    # have been the server's verdict on another From address of the same mail (a pass
    # without header.from counts for any From domain): with `require_auth: [dmarc]`, a
    # stranger adding the owner's address as a second From was taken for the owner.
    assert _verified(_raw(from_lines, "mx.example.com; dmarc=pass"), require_auth=["dmarc"]) is (
        False
    )


def test_one_from_address_with_a_pass_is_verified() -> None:
    raw = _raw([f"Robin <{OWNER}>"], "mx.example.com; dmarc=pass")
    assert _verified(raw, require_auth=["dmarc"]) is True


@pytest.mark.parametrize(
    "sender",
    [
        "attacker@evil.example",  # the owner's name as display name (below)
        "robin.owner+bot@example.org",  # plus-addressing
        "robin.owner@exаmple.org",  # Cyrillic a
        "robin.owner＠example.org",  # full-width @
        "robin.owner@example.org.evil.example",
        "robin.owner@xn--exmple-cua.org",  # IDN look-alike
    ],
)
def test_look_alikes_of_the_owners_address_are_not_the_owner(tmp_path: object, sender: str) -> None:
    identities = OwnerIdentities(
        make_config(tmp_path, owner={"identities": owner_identities()})  # type: ignore[arg-type]
    )
    raw = _raw([f'"Robin Owner <{OWNER}>" <{sender}>'], "mx.example.com; dkim=pass")
    msg = to_inbound(parse_message(raw), raw, 1, "1", EmailChannelConfig())
    assert identities.match("email", msg.sender_id) is None, (sender, msg.sender_id)
    # while the owner's own address, in any case, is
    assert identities.match("email", OWNER.upper()) is not None
    assert OWNER in OWNER_EMAIL.lower()
