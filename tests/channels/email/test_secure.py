"""Signed and encrypted mail (channels.email.secure): the text an S/MIME or PGP signature
wraps reaches the turn, the signature is no attachment, and encrypted mail says what it is.

The S/MIME structures were made with ``openssl smime -sign -nodetach`` (``-stream``, as
Outlook streams it: BER of indefinite length, its content in pieces, and without, DER)
and ``openssl smime -encrypt``, with a throwaway key made for this test.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from channels.email.parsing import parse_message
from channels.email.secure import ENCRYPTED_PGP, ENCRYPTED_SMIME, signed_content

# A signed multipart/mixed (its text, quoted-printable UTF-8, and ticket.pdf), streamed.
SIGNED_STREAMED = (
    "MIAGCSqGSIb3DQEHAqCAMIACAQExDzANBglghkgBZQMEAgEFADCABgkqhkiG9w0BBwGggCSABIIB\n"
    "dUNvbnRlbnQtVHlwZTogbXVsdGlwYXJ0L21peGVkOyBib3VuZGFyeT0ibTEiDQoNCi0tbTENCkNv\n"
    "bnRlbnQtVHlwZTogdGV4dC9wbGFpbjsgY2hhcnNldD11dGYtOA0KQ29udGVudC1UcmFuc2Zlci1F\n"
    "bmNvZGluZzogcXVvdGVkLXByaW50YWJsZQ0KDQpQbGVhc2UgYm9vayB0aGUgZmxpZ2h0IHRvIFBv\n"
    "cnRvIG9uIEZyaWRheSwgY2FmPUMzPUE5IGF0IDkuDQotLW0xDQpDb250ZW50LVR5cGU6IGFwcGxp\n"
    "Y2F0aW9uL3BkZjsgbmFtZT0idGlja2V0LnBkZiINCkNvbnRlbnQtRGlzcG9zaXRpb246IGF0dGFj\n"
    "aG1lbnQ7IGZpbGVuYW1lPSJ0aWNrZXQucGRmIg0KQ29udGVudC1UcmFuc2Zlci1FbmNvZGluZzog\n"
    "YmFzZTY0DQoNCkpWQkVSaTB4TGpRSw0KLS1tMS0tDQoAAAAAAAAxggHYMIIB1AIBATBHMC8xDjAM\n"
    "BgNVBAMMBU93bmVyMR0wGwYJKoZIhvcNAQkBFg5tZUBleGFtcGxlLm9yZwIUXj9nKnELw/kxCFgA\n"
    "9ujHsCAt02gwDQYJYIZIAWUDBAIBBQCggeQwGAYJKoZIhvcNAQkDMQsGCSqGSIb3DQEHATAcBgkq\n"
    "hkiG9w0BCQUxDxcNMjYxMTI3MTcxMzI3WjAvBgkqhkiG9w0BCQQxIgQg1k3Gmd3kRo9hD+ohB7iu\n"
    "4IGz+poSm8ZKaGP7PFl8PNcweQYJKoZIhvcNAQkPMWwwajALBglghkgBZQMEASowCwYJYIZIAWUD\n"
    "BAEWMAsGCWCGSAFlAwQBAjAKBggqhkiG9w0DBzAOBggqhkiG9w0DAgICAIAwDQYIKoZIhvcNAwIC\n"
    "AUAwBwYFKw4DAgcwDQYIKoZIhvcNAwICASgwDQYJKoZIhvcNAQEBBQAEgYAPyp48ZIvOUV9ZynaU\n"
    "3T34zjMFexHe2yco8DVn2gcpKOMSuRuslO9nw+haCu0Ro/QKN5YOoLDJ2yEeONFwUH1xFZHCTtaQ\n"
    "nYawyaslTkEB9/ofqxX5+/tZUVgSgfyEFfuDBE2nUuWbnqRDqAUMwI2GpMPa1seceNlu/rlZTSrw\n"
    "SQAAAAAAAA==\n"
)
# A signed text/plain part, DER.
SIGNED_DER = (
    "MIICqwYJKoZIhvcNAQcCoIICnDCCApgCAQExDzANBglghkgBZQMEAgEFADCBpQYJKoZIhvcNAQcB\n"
    "oIGXBIGUQ29udGVudC1UeXBlOiB0ZXh0L3BsYWluOyBjaGFyc2V0PXV0Zi04DQpDb250ZW50LVRy\n"
    "YW5zZmVyLUVuY29kaW5nOiBxdW90ZWQtcHJpbnRhYmxlDQoNClBsZWFzZSBib29rIHRoZSBmbGln\n"
    "aHQgdG8gUG9ydG8gb24gRnJpZGF5LCBjYWY9QzM9QTkgYXQgOS4NCjGCAdgwggHUAgEBMEcwLzEO\n"
    "MAwGA1UEAwwFT3duZXIxHTAbBgkqhkiG9w0BCQEWDm1lQGV4YW1wbGUub3JnAhReP2cqcQvD+TEI\n"
    "WAD26MewIC3TaDANBglghkgBZQMEAgEFAKCB5DAYBgkqhkiG9w0BCQMxCwYJKoZIhvcNAQcBMBwG\n"
    "CSqGSIb3DQEJBTEPFw0yNjExMjcxNzEzMjdaMC8GCSqGSIb3DQEJBDEiBCDS+WVMkYosK551RfCO\n"
    "o8Nkb2Bil25oI83QcV9GqoDpYjB5BgkqhkiG9w0BCQ8xbDBqMAsGCWCGSAFlAwQBKjALBglghkgB\n"
    "ZQMEARYwCwYJYIZIAWUDBAECMAoGCCqGSIb3DQMHMA4GCCqGSIb3DQMCAgIAgDANBggqhkiG9w0D\n"
    "AgIBQDAHBgUrDgMCBzANBggqhkiG9w0DAgIBKDANBgkqhkiG9w0BAQEFAASBgIQVrgfFkVcFM1iB\n"
    "iaUUwV/aspQ7mfcEWDNSHvGppxrb1D9kF3pWpwrlhYvNn9sq2iYXkIv3iZdqcTMj9LDiITDS3tY0\n"
    "tcV2bG73kg9/rMIHoBO465WINtzndfTCEktWxBTthQ8GcBQmlJHzND95Czpd7V2jrvj/HVPbpXMO\n"
    "pGnU\n"
)
# A signed XML file (an e-invoice, fattura.xml.p7m): no mail inside.
SIGNED_INVOICE = (
    "MIICZgYJKoZIhvcNAQcCoIICVzCCAlMCAQExDzANBglghkgBZQMEAgEFADBhBgkqhkiG9w0BBwGg\n"
    "VARSPD94bWwgdmVyc2lvbj0iMS4wIj8+PEZhdHR1cmFFbGV0dHJvbmljYT48TnVtZXJvPjQyPC9O\n"
    "dW1lcm8+PC9GYXR0dXJhRWxldHRyb25pY2E+CjGCAdgwggHUAgEBMEcwLzEOMAwGA1UEAwwFT3du\n"
    "ZXIxHTAbBgkqhkiG9w0BCQEWDm1lQGV4YW1wbGUub3JnAhReP2cqcQvD+TEIWAD26MewIC3TaDAN\n"
    "BglghkgBZQMEAgEFAKCB5DAYBgkqhkiG9w0BCQMxCwYJKoZIhvcNAQcBMBwGCSqGSIb3DQEJBTEP\n"
    "Fw0yNjExMjcxNzEzMjdaMC8GCSqGSIb3DQEJBDEiBCBhp4tB3ejOALpQB3tSPP08qxZfe3wh5yXV\n"
    "7jHEmqZPXDB5BgkqhkiG9w0BCQ8xbDBqMAsGCWCGSAFlAwQBKjALBglghkgBZQMEARYwCwYJYIZI\n"
    "AWUDBAECMAoGCCqGSIb3DQMHMA4GCCqGSIb3DQMCAgIAgDANBggqhkiG9w0DAgIBQDAHBgUrDgMC\n"
    "BzANBggqhkiG9w0DAgIBKDANBgkqhkiG9w0BAQEFAASBgF/8Dn+cjLIt2iigxxOulv0uak3m3Zn1\n"
    "Ma5cD4r601Kt2CIeKEuVyCdHq6X+Dpm/GEtg10f3MILBatEefkJd7jl3DSjyLVcLSxfSq7Sx2xSc\n"
    "j7ylIMQmTihtA03sh27KkUvXTHSyUonn8oqshHszB0nWr6rE0BRfX1EFYGz4iNTd\n"
)
# Enveloped (encrypted) data.
ENCRYPTED = (
    "MIIBuQYJKoZIhvcNAQcDoIIBqjCCAaYCAQAxgeEwgd4CAQAwRzAvMQ4wDAYDVQQDDAVPd25lcjEd\n"
    "MBsGCSqGSIb3DQEJARYObWVAZXhhbXBsZS5vcmcCFF4/ZypxC8P5MQhYAPbox7AgLdNoMA0GCSqG\n"
    "SIb3DQEBAQUABIGAC8I+Yf6HuqMghaGHNrtszMH2hQQn9ImHTtpVl/qFwgVSO/LlkUoqINp3NTv5\n"
    "rj7YiGEBKvDl9KC7vxKRBLdSfSRgQHwgKpRnDt3JVU7VjOFDOpF+wPdr3+NU5VCicAnpNeQb/l7W\n"
    "zEHlHPiQ3oDPszxLoX9llvwbxq0retBNNyowgbwGCSqGSIb3DQEHATAUBggqhkiG9w0DBwQIaXbB\n"
    "LT2GkaCAgZih95iW9+iKvuQSb1jOPC8dzVGlV59nZdA5odb7+c0+m6RKBzBVPUHO+Updrg8ymz3Q\n"
    "beEran8iW9Z+g1Uyfz9zwA7sTPJOKhAOp/vwYXBfM8nKoTiOf50GOtDXtwp/6sSYYEmK9b5H1wp0\n"
    "lWNs8pdTY7rX/8QGkwFzh1j60qLQkwLZIyCTz9Rrsvklr6C45qMQPinmdnX+tw==\n"
)


def smime_mail(body: str, smime_type: str | None = "signed-data", name: str = "smime.p7m") -> bytes:
    kind = f"; smime-type={smime_type}" if smime_type else ""
    return (
        "From: Owner <me@example.org>\r\nTo: assistant@example.com\r\nSubject: Flight\r\n"
        "Message-ID: <sm1@example.org>\r\nMIME-Version: 1.0\r\n"
        f'Content-Disposition: attachment; filename="{name}"\r\n'
        f'Content-Type: application/pkcs7-mime{kind}; name="{name}"\r\n'
        f"Content-Transfer-Encoding: base64\r\n\r\n{body}"
    ).encode()


def test_an_opaque_s_mime_signature_is_read_as_the_mail_it_signs() -> None:
    # Outlook's signed mail when clear-text signing is off: the text is inside the
    # signature. It was named as a file, smime.p7m, and the turn had no text.
    mail = parse_message(smime_mail(SIGNED_STREAMED))
    assert mail.text.strip() == "Please book the flight to Porto on Friday, café at 9."
    assert [(a.name, a.mime_type) for a in mail.attachments] == [("ticket.pdf", "application/pdf")]
    # DER (definite lengths), and with no smime-type but its usual name
    for raw in (smime_mail(SIGNED_DER), smime_mail(SIGNED_DER, smime_type=None)):
        mail = parse_message(raw)
        assert mail.text.strip() == "Please book the flight to Porto on Friday, café at 9."
        assert mail.attachments == ()


def test_a_signed_file_stays_a_file() -> None:
    invoice = smime_mail(SIGNED_INVOICE, smime_type=None, name="fattura.xml.p7m")
    mail = parse_message(invoice)
    assert "FatturaElettronica" not in mail.text
    assert [a.name for a in mail.attachments] == ["fattura.xml.p7m"]
    # signed-data, but what it signs is no mail: still the file
    mail = parse_message(smime_mail(SIGNED_INVOICE, name="fattura.xml.p7m"))
    assert [a.name for a in mail.attachments] == ["fattura.xml.p7m"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda der: der[: len(der) // 2],  # cut short
        lambda der: der[:40] + bytes(200),  # zeros inside
        lambda der: b"\x30\x80" * 5000,  # indefinite lengths nested thousands deep
        lambda der: b"\x30\x84\xff\xff\xff\xff",  # a length past the end
        lambda der: b"not a signature at all",
    ],
)
def test_a_damaged_signature_is_named_as_a_file(damage: Callable[[bytes], bytes]) -> None:
    der = base64.b64decode(SIGNED_STREAMED)
    broken = damage(der)
    assert signed_content(broken) is None
    mail = parse_message(smime_mail(base64.b64encode(broken).decode()))
    assert [a.name for a in mail.attachments] == ["smime.p7m"]


def test_encrypted_mail_says_it_cannot_be_read() -> None:
    mail = parse_message(smime_mail(ENCRYPTED, smime_type="enveloped-data"))
    assert mail.text == ENCRYPTED_SMIME
    assert mail.attachments == ()
    assert parse_message(smime_mail(ENCRYPTED, smime_type=None)).text == ENCRYPTED_SMIME
    pgp = (
        b"From: Owner <me@example.org>\r\nSubject: Secret\r\nMessage-ID: <pe@example.org>\r\n"
        b"MIME-Version: 1.0\r\nContent-Type: multipart/encrypted; "
        b'protocol="application/pgp-encrypted"; boundary="b"\r\n\r\n'
        b"--b\r\nContent-Type: application/pgp-encrypted\r\n\r\nVersion: 1\r\n"
        b'--b\r\nContent-Type: application/octet-stream; name="encrypted.asc"\r\n\r\n'
        b"-----BEGIN PGP MESSAGE-----\r\nhQEMA\r\n-----END PGP MESSAGE-----\r\n--b--\r\n"
    )
    mail = parse_message(pgp)
    assert mail.text == ENCRYPTED_PGP
    assert mail.attachments == ()


def test_inline_pgp_leaves_the_text_that_was_signed() -> None:
    raw = (
        b"From: Owner <me@example.org>\r\nSubject: Flight\r\nMessage-ID: <c1@example.org>\r\n"
        b"\r\nAbove the block.\r\n\r\n"
        b"-----BEGIN PGP SIGNED MESSAGE-----\r\nHash: SHA256\r\n\r\n"
        b"Please book the flight to Porto.\r\n- - the window seat\r\n- -- \r\nAnn\r\n"
        b"-----BEGIN PGP SIGNATURE-----\r\n\r\niQEzBAEBCAAdFiEE\r\n=abcd\r\n"
        b"-----END PGP SIGNATURE-----\r\n"
    )
    text = parse_message(raw).text
    assert "PGP" not in text and "iQEzBAEB" not in text and "Hash:" not in text
    assert (
        "Above the block.\n\nPlease book the flight to Porto.\n- the window seat\n-- \nAnn" in text
    )


def test_a_detached_signature_is_no_attachment() -> None:
    raw = (
        b"From: Owner <me@example.org>\r\nSubject: Flight\r\nMessage-ID: <d1@example.org>\r\n"
        b"MIME-Version: 1.0\r\nContent-Type: multipart/signed; micalg=sha-256; "
        b'protocol="application/pkcs7-signature"; boundary="s"\r\n\r\n'
        b"--s\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nPlease book it.\r\n"
        b'--s\r\nContent-Type: application/pkcs7-signature; name="smime.p7s"\r\n'
        b'Content-Disposition: attachment; filename="smime.p7s"\r\n'
        b"Content-Transfer-Encoding: base64\r\n\r\n" + SIGNED_DER.encode() + b"--s--\r\n"
    )
    mail = parse_message(raw)
    assert mail.text.strip() == "Please book it."
    assert mail.attachments == ()
